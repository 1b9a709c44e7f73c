package api

import (
	"context"
	"net/http"
	"net/url"
)

// PinRequest tells the coordinator what the first verified fetch of a
// remote source without a declared sha256 got, so that every later fetch
// on every node verifies against it (POST /v1/pins, agent token). The
// answer is the catalog entry with its pin; a pin of other bytes than the
// one already recorded is answered CodeConflict, with the message of
// catalog.PinMismatch.
type PinRequest struct {
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
	// ETag is how the origin named the version of those bytes when the
	// fetch got them: "ETag: ...", the hub's "X-Repo-Commit: ...,
	// X-Linked-Etag: ...", or "Last-Modified: ..." (weights/fetch.originOf).
	// It is recorded beside the pin and shown to admins (models list, the
	// pin mismatch), never checked: the sha256 is what every fetch verifies.
	ETag string `json:"etag,omitempty"`
	// Node is the node that fetched: with munge or a node's own token, the
	// coordinator takes a pin only from that node (coordinator/pin.go).
	Node string `json:"node,omitempty"`
}

// Pin reports a verified fetch's digest for pinning.
func (c *Client) Pin(ctx context.Context, p PinRequest) (Model, error) {
	var out Model
	err := c.Do(ctx, http.MethodPost, "/"+Version+"/pins", p, &out)
	return out, err
}

// Repin forgets a model's pin, so that the next verified fetch pins the
// bytes the origin serves then (DELETE /v1/pins/{name}, admin token).
func (c *Client) Repin(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, "/"+Version+"/pins/"+url.PathEscape(name), nil, nil)
}
