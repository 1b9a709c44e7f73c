package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// A cluster-wide gc reaches nodes the way everything else does: the
// coordinator cannot open a node's unix socket, so it records the request
// (POST /v1/gc), hands each agent what it asks of its node in the answer to
// the agent's next report (ReportAnswer.GC), and stores what the agent
// answers (POST /v1/gc/{id}/answers). GET /v1/gc/{id} shows the request and
// every answer so far. Each node decides: "asked to remove" is all the
// coordinator can say.

// ReportAnswer is the body of the coordinator's 202 answer to a report.
type ReportAnswer struct {
	// Result is "stored", or "dropped" when a report at least as new from
	// the same agent was already stored (a replay, or a late arrival).
	Result string `json:"result"`
	// GC, when set, is a gc request for this node: the agent runs it and
	// posts its answer.
	GC *GCAsk `json:"gc,omitempty"`
	// Seed, when set, names models an admin asked this node to hold
	// (llmgw seed): the agent ensures each as a job's Prolog would, through
	// its fabric's swarm.
	Seed []SeedAsk `json:"seed,omitempty"`
	// CatalogTag names the catalog as the coordinator serves it now (GET
	// /v1/models): its identity, its generation and a digest of the whole
	// answer, in one opaque string that changes whenever anything a node
	// reads from the catalog does (an entry added, changed or removed, a
	// pin taken or forgotten, the history, the names an admin's change
	// dropped, an admin's adoption by gc --trust). An agent that last read the catalog after
	// an answer with the same tag has it already and does not read it
	// again: a catalog of Hub models is megabytes a node would otherwise
	// download after every report. Empty from a coordinator older than it,
	// whose agents read the catalog after every report, as they always did.
	CatalogTag string `json:"catalog_tag,omitempty"`
	// Prefetch, when set, is every prefetch the coordinator wants of this
	// node now (see PrefetchList); unset says nothing.
	Prefetch *PrefetchList `json:"prefetch,omitempty"`
}

// SeedAsk is one model a node is asked to fetch ahead of the jobs.
type SeedAsk struct {
	Model  string `json:"model"`
	Source string `json:"source"`
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size_bytes,omitempty"`
}

// GCRequest is the body of POST /v1/gc (admin token).
type GCRequest struct {
	// Collect removes; without it the nodes only list what they would.
	Collect bool `json:"collect"`
	// Node restricts the request to one node; empty asks every node.
	Node string `json:"node,omitempty"`
	// Force, with Collect, has the nodes collect against a catalog they do
	// not trust (another identity, an older generation) and beyond
	// gc_max_share of their cache, and trust that catalog from then on.
	Force bool `json:"force,omitempty"`
	// Trust has every node adopt the catalog as it stands as the one it
	// trusts (the coordinator records the adoption, so a node down now
	// adopts it when it next reads the catalog), without lifting any other
	// guard: gc_max_share still holds.
	Trust bool `json:"trust,omitempty"`
}

// GCAsk is what the coordinator asks one node, in the answer to its report.
type GCAsk struct {
	ID      string `json:"id"`
	Collect bool   `json:"collect"`
	// Remove are file names in the node's cache directory that the
	// coordinator believes no catalog entry wants (from the node's own
	// reports). Names only, never paths: the node checks each one itself.
	Remove []string `json:"remove"`
	// Force: see GCRequest.Force.
	Force bool `json:"force,omitempty"`
	// Trust: see GCRequest.Trust.
	Trust bool `json:"trust,omitempty"`
}

// GCFile is what a node did with one file (see weights/gc.File).
type GCFile struct {
	Name  string `json:"name"`
	Path  string `json:"path,omitempty"`
	Asked bool   `json:"asked,omitempty"`
	// Action is listed, removed, kept, refused, failed, or evicted: removed
	// by the agent's eviction under pressure before this request (Reason
	// says when, why, and what triggered it). Eviction's plan, when the
	// cache is above cache_high, shows as listed and kept files whose
	// Reason begins "eviction".
	Action string `json:"action"`
	Reason string `json:"reason"`
	Size   int64  `json:"size_bytes,omitempty"`
}

// GCAnswer is a node's answer to a gc request (POST /v1/gc/{id}/answers,
// agent token).
type GCAnswer struct {
	Node     string   `json:"node"`
	CacheDir string   `json:"cache_dir,omitempty"`
	Collect  bool     `json:"collect"`
	Files    []GCFile `json:"files"`
	Freed    int64    `json:"freed_bytes"`
	// Held says why the node removed nothing at all (its catalog copy
	// unreadable or empty, a job record unreadable); empty otherwise.
	Held string `json:"held,omitempty"`
}

// GCStatus is a gc request and the answers so far (POST /v1/gc answers it
// too, with no answers yet).
type GCStatus struct {
	ID      string    `json:"id"`
	Collect bool      `json:"collect"`
	Node    string    `json:"node,omitempty"`
	Force   bool      `json:"force,omitempty"`
	Trust   bool      `json:"trust,omitempty"`
	Created time.Time `json:"created"`
	// Deadline is when the request stops being handed to nodes: two report
	// intervals after Created. A node that has not reported by then never
	// gets it, and is named as not answering.
	Deadline time.Time `json:"deadline"`
	// Nodes are the nodes asked, in name order.
	Nodes []GCNode `json:"nodes"`
}

// GCNode is one node's part in a gc request.
type GCNode struct {
	Node string `json:"node"`
	// Handed is when the request reached the node's agent (zero: not yet).
	Handed time.Time `json:"handed,omitzero"`
	// Asked are the names the coordinator asked the node to remove.
	Asked []string `json:"asked"`
	// Answered is when the node's answer arrived (zero: none yet).
	Answered time.Time `json:"answered,omitzero"`
	Answer   *GCAnswer `json:"answer,omitempty"`
}

// StartGC records a gc request (admin token).
func (c *Client) StartGC(ctx context.Context, req GCRequest) (GCStatus, error) {
	var out GCStatus
	err := c.Do(ctx, http.MethodPost, "/v1/gc", req, &out)
	return out, err
}

// GC returns a gc request and the answers so far.
func (c *Client) GC(ctx context.Context, id string) (GCStatus, error) {
	var out GCStatus
	err := c.Do(ctx, http.MethodGet, "/v1/gc/"+url.PathEscape(id), nil, &out)
	return out, err
}

// AnswerGC posts a node's answer to a gc request (agent token).
func (c *Client) AnswerGC(ctx context.Context, id string, a GCAnswer) error {
	return c.Do(ctx, http.MethodPost, "/v1/gc/"+url.PathEscape(id)+"/answers", a, nil)
}

// WaitGC polls request st, just created, until every node it asks has
// answered or the request's time to be handed out plus grace has passed
// (an agent handed it just before its deadline still needs a moment to
// answer), and returns the last state seen. The wait is measured on this
// machine's clock, so a coordinator whose clock is off does not shorten it.
// Only a failure to read the request is an error; the nodes that did not
// answer are those without an Answer.
func (c *Client) WaitGC(ctx context.Context, st GCStatus, poll, grace time.Duration) (GCStatus, error) {
	until := time.Now().Add(st.Deadline.Sub(st.Created) + grace)
	for {
		cur, err := c.GC(ctx, st.ID)
		if err != nil {
			return st, err
		}
		st = cur
		all := true
		for _, n := range st.Nodes {
			all = all && n.Answer != nil
		}
		if all || !time.Now().Before(until) {
			return st, nil
		}
		t := time.NewTimer(min(poll, time.Until(until)+time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return st, ctx.Err()
		case <-t.C:
		}
	}
}
