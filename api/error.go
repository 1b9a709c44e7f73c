package api

import (
	"fmt"
	"net/http"

	"github.com/llmgw/llmgw/slurm"
)

// Error codes. Each maps to one HTTP status; a client tests the code, a
// person reads the message.
const (
	CodeInvalid      = "invalid"      // 400: the request is malformed or a value is out of bounds
	CodeUnauthorized = "unauthorized" // 401: no token, or one that matches nothing
	CodeForbidden    = "forbidden"    // 403: a valid token without the right for this call
	CodeNotFound     = "not_found"    // 404
	CodeConflict     = "conflict"     // 409: the change collides with what is there
	CodeTooLarge     = "too_large"    // 413: the body is over the limit
	CodeUnavailable  = "unavailable"  // 503: the service cannot answer now (database unusable)
	CodeInternal     = "internal"     // 500
)

// Error is the body of every non-2xx answer, from the coordinator and from
// the agent's socket alike.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Status is the HTTP status the error came with; not on the wire.
	Status int `json:"-"`
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, http.StatusText(e.Status))
	}
	return e.Message
}

// Errorf returns an *Error with a code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// HTTPStatus is the status an error code is answered with.
func HTTPStatus(code string) int {
	switch code {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeConflict:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// MaxNodeName: see slurm.MaxNodeName.
const MaxNodeName = slurm.MaxNodeName

// ValidNodeName: see slurm.ValidNodeName.
func ValidNodeName(name string) error { return slurm.ValidNodeName(name) }

// ValidFabricName: see slurm.ValidFabricName.
func ValidFabricName(name string) error { return slurm.ValidFabricName(name) }
