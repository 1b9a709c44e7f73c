package api

import (
	"fmt"
	"net/http"
	"regexp"
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

// MaxNodeName bounds a node name. Slurm's own limit is higher, but a name
// this long is a mistake, and names reach logs, tables and hostlists.
const MaxNodeName = 128

// Node and fabric names become parts of hostlists, feature names and table
// cells; letters, digits, '.', '_' and '-' cover every Slurm NodeName seen in
// practice while keeping out separators (",", "[", "]") and whitespace.
var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidNodeName says why name cannot be a node name, or nil.
func ValidNodeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("node name is empty")
	case len(name) > MaxNodeName:
		return fmt.Errorf("node name %.40q… is %d characters; the limit is %d", name, len(name), MaxNodeName)
	case !nodeNameRE.MatchString(name):
		return fmt.Errorf("node name %q may contain only letters, digits, '.', '_' and '-', and must start with a letter or digit", name)
	}
	return nil
}

// ValidFabricName says why name cannot be a fabric name, or nil. Fabrics
// follow the node-name rule: they appear in the same places.
func ValidFabricName(name string) error {
	if err := ValidNodeName(name); err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	return nil
}
