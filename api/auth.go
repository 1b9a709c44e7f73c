package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// MungeScheme is the Authorization scheme of a request that carries a MUNGE
// credential: "Authorization: MUNGE <credential>".
const MungeScheme = "MUNGE"

// MungePayload is what a request's MUNGE credential must carry: the method,
// the path with its query, and the body's sha256. A credential taken off the
// wire therefore cannot authenticate another request (and munged refuses it
// a second time anyway).
func MungePayload(method, requestURI string, body []byte) []byte {
	sum := sha256.Sum256(body)
	return []byte("llmgw/1\n" + method + "\n" + requestURI + "\n" + hex.EncodeToString(sum[:]))
}

// Authenticator gives one request its Authorization header. Client uses it
// when set, in place of Token.
type Authenticator interface {
	Authorization(ctx context.Context, method, requestURI string, body []byte) (string, error)
}

// NodeToken is a node's own token, as made by POST /v1/nodes/{node}/token:
// shown once, installed on that node (mode 0600) as its agent's token_file.
type NodeToken struct {
	Node  string `json:"node"`
	Token string `json:"token"`
}
