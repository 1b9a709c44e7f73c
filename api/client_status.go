package api

import (
	"context"
	"net/http"
	"net/url"
)

// Status returns every catalog model's presence, per fabric.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var out Status
	if err := c.Do(ctx, http.MethodGet, "/v1/status", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ModelStatus returns one model's presence per fabric and node by node. An
// unknown model is an *Error with CodeNotFound.
func (c *Client) ModelStatus(ctx context.Context, model string) (*ModelNodes, error) {
	var out ModelNodes
	if err := c.Do(ctx, http.MethodGet, "/v1/status/"+url.PathEscape(model), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
