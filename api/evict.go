package api

import (
	"context"
	"net/http"
)

// Eviction asks the coordinator one thing it alone knows: whether a
// node's copy of a model is the last complete one in its fabric. The agent
// asks about the models it holds (Models), plans, and then names the
// models whose copies it means to evict (Evict): the coordinator grants
// each only while another node of the fabric still holds the model, and
// counts a granted copy as gone at once, so that two nodes evicting at the
// same moment cannot both remove the fabric's last two copies. A grant
// lapses after two report intervals, by when the node's report says what
// it did.

// EvictQuery is the body of POST /v1/evict (the node's own credential).
type EvictQuery struct {
	Node string `json:"node"`
	// Models are asked about: the answer's Others.
	Models []string `json:"models,omitempty"`
	// Evict are the models whose copies the node means to remove.
	Evict []string `json:"evict,omitempty"`
}

// EvictAnswer is the answer to an EvictQuery.
type EvictAnswer struct {
	// Fabric is the node's fabric, as its last report said.
	Fabric string `json:"fabric"`
	// Others maps each model asked (Models and Evict) to how many other
	// nodes of the fabric hold it complete now, not counting copies
	// granted for eviction: a node that sees it on a shared filer counts,
	// and so does the asking node's own view of such a filer.
	Others map[string]int `json:"others"`
	// Granted are the models of Evict the node may evict.
	Granted []string `json:"granted"`
}

// Evict asks the coordinator about the fabric's copies (see EvictQuery).
func (c *Client) Evict(ctx context.Context, q EvictQuery) (EvictAnswer, error) {
	var a EvictAnswer
	err := c.Do(ctx, http.MethodPost, "/v1/evict", q, &a)
	return a, err
}
