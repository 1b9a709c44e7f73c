package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Seeding on purpose (llmgw seed, issue 18): an admin asks for copies of a
// catalog model in a fabric before any job wants it. The coordinator
// records the request (POST /v1/seed), picks the nodes, and hands each a
// SeedAsk in the answer to every report it sends (ReportAnswer.Seed) until
// the node reports holding the model or the request's deadline passes. The
// agents fetch as a job's Prolog would, through the fabric's swarm: one
// origin read for the fabric, the rest from peers. GET /v1/seed/{id} shows
// each node's progress.

// SeedRequest is the body of POST /v1/seed (admin).
type SeedRequest struct {
	Model  string `json:"model"`
	Fabric string `json:"fabric"`
	// Copies is how many nodes of the fabric should hold the model; nodes
	// that hold it already count. Zero without Nodes means one.
	Copies int `json:"copies,omitempty"`
	// Nodes, instead of Copies, is a hostlist of the fabric's nodes that
	// should hold it.
	Nodes string `json:"nodes,omitempty"`
	// AskFor is how long the coordinator keeps asking, in seconds; zero
	// is SeedAskFor.
	AskFor float64 `json:"ask_for_seconds,omitempty"`
}

// SeedAskFor is how long a seed request is handed out by default: long
// enough for a large model to arrive over a slow uplink, short enough that
// a node that cannot fetch it (origin down, no room) is not asked all week.
const SeedAskFor = time.Hour

// A node's part in a seed request.
const (
	// SeedHeld: the node held the model when the request was made, so it
	// was not asked; it counts toward the copies.
	SeedHeld = "held"
	// SeedAsked: asked at each of its reports until it holds the model.
	SeedAsked = "asked"
	// SeedDone: the node reported holding the model after it was asked.
	SeedDone = "done"
	// SeedExpired: the deadline passed before it reported holding it.
	SeedExpired = "expired"
)

// SeedStatus is a seed request and each node's part in it.
type SeedStatus struct {
	ID     string `json:"id"`
	Model  string `json:"model"`
	Fabric string `json:"fabric"`
	// Copies is the number of nodes the request wants holding the model.
	Copies   int       `json:"copies"`
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline"`
	// Note says what limits the request, when something does (the model
	// has no pinned digest, so each node reads the origin).
	Note string `json:"note,omitempty"`
	// Nodes are the nodes the request names, in name order.
	Nodes []SeedNode `json:"nodes"`
}

// SeedNode is one node's part in a seed request.
type SeedNode struct {
	Node string `json:"node"`
	// State is SeedHeld, SeedAsked, SeedDone or SeedExpired.
	State string `json:"state"`
	// Handed is when the ask first reached the node's agent (zero: not
	// yet); Done when the node first reported holding the model.
	Handed time.Time `json:"handed,omitzero"`
	Done   time.Time `json:"done,omitzero"`
	// Fetch is the node's fetch of the model as it last reported it.
	Fetch *FetchStatus `json:"fetch,omitempty"`
}

// Seed records a seed request (admin) and returns it with the nodes chosen.
func (c *Client) Seed(ctx context.Context, req SeedRequest) (SeedStatus, error) {
	var out SeedStatus
	err := c.Do(ctx, http.MethodPost, "/"+Version+"/seed", req, &out)
	return out, err
}

// SeedStatus returns a seed request and each node's progress.
func (c *Client) SeedStatus(ctx context.Context, id string) (SeedStatus, error) {
	var out SeedStatus
	err := c.Do(ctx, http.MethodGet, "/"+Version+"/seed/"+url.PathEscape(id), nil, &out)
	return out, err
}

// Pending says whether any node of st is still asked.
func (st SeedStatus) Pending() bool {
	for _, n := range st.Nodes {
		if n.State == SeedAsked {
			return true
		}
	}
	return false
}
