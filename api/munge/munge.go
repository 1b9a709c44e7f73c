// Package munge encodes and decodes MUNGE credentials: the identity every
// Slurm node already has. A credential says which uid and gid made it and
// from which address (the encoding munged's origin), munged refuses one
// decoded twice (its replay cache), and only hosts holding the cluster's
// key can make one. llmgw uses them to know which node a report comes from
// and which user sends a command, without tokens to hand out.
//
// Three ways to talk to munged are built: libmunge through cgo (lib.go,
// when cgo is on), the munge/unmunge programs (programs.go, always), and
// munged's client protocol spoken from Go (wire.go, decode only). New
// decodes through the protocol and encodes through the library when it is
// built in: a decode through libmunge costs a fraction of starting unmunge,
// but holds a P while munged answers, which on a busy coordinator starved
// the rest of the ingest; the protocol waits on the network poller instead
// (see BenchmarkDecode and BenchmarkCoordinatorMunge).
package munge

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/llmgw/llmgw/api"
)

// DefaultSocket is munged's socket when nothing else is configured.
const DefaultSocket = "/run/munge/munge.socket.2"

// Cred is what a decoded credential tells.
type Cred struct {
	UID, GID uint32
	// Addr is the origin address the encoding munged put in the
	// credential (its --origin, else its host's address).
	Addr    netip.Addr
	Payload []byte
}

// Codec encodes and decodes credentials through one munged.
type Codec interface {
	Encode(ctx context.Context, payload []byte) (string, error)
	Decode(ctx context.Context, cred string) (Cred, error)
	// Socket is munged's socket this codec talks to.
	Socket() string
}

// Status codes munged answers with (munge_err_t); the ones llmgw treats
// apart from "failed".
const (
	StatusSocket   = 6  // munged is not reachable
	StatusExpired  = 15 // older than its TTL
	StatusRewound  = 16 // encoded in the future: clocks differ
	StatusReplayed = 17 // decoded before
)

// Error is a failed encode or decode, with munged's status.
type Error struct {
	Op     string // "encode" or "decode"
	Status int
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("munge %s: %s (status %d)", e.Op, e.Msg, e.Status)
}

// IsReplayed says whether err is munged refusing a credential it decoded
// before.
func IsReplayed(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == StatusReplayed
}

// New returns the codec for socket (DefaultSocket when empty): a *Wire
// that decodes itself and encodes through libmunge when built with cgo,
// else through the munge program.
func New(socket string) Codec {
	if socket == "" {
		socket = DefaultSocket
	}
	enc := newLib(socket)
	if enc == nil {
		enc = &Programs{Path: socket}
	}
	return &Wire{Path: socket, Enc: enc}
}

// Authenticator authenticates API requests with a credential from Codec:
// an api.Authenticator.
type Authenticator struct{ Codec Codec }

// Authorization encodes the request's api.MungePayload.
func (a Authenticator) Authorization(ctx context.Context, method, requestURI string, body []byte) (string, error) {
	cred, err := a.Codec.Encode(ctx, api.MungePayload(method, requestURI, body))
	if err != nil {
		return "", err
	}
	return api.MungeScheme + " " + cred, nil
}
