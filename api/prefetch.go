package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Prefetch (issue 28): the coordinator reads backfill's plan for pending
// jobs that name a model, once per backfill interval, and once a job's plan
// is the same in two reads in a row it asks each planned node that lacks
// the model to fetch it ahead of the start, in the answer to the node's
// report (ReportAnswer.Prefetch), as seed asks ride there. A prefetch is a
// hint: the agent runs it below every fetch a job waits for, never evicts
// for it, and cancels it (keeping the partial bytes to resume) when the
// list no longer names it.

// PrefetchList is every prefetch the coordinator wants of one node now.
// The agent starts those it is not running and cancels, keeping their
// bytes, those it runs that the list does not name. A report answer
// without a list says nothing either way (an older coordinator, prefetch
// off, a coordinator that has not read two plans yet since it started):
// the agent keeps the last list until Lease has passed since it came, then
// cancels what it names, so a coordinator that stopped asking does not
// leave nodes fetching for plans nobody watches.
type PrefetchList struct {
	Asks []PrefetchAsk `json:"asks"`
	// Lease is how long the list stands without word, in seconds.
	Lease float64 `json:"lease_seconds"`
}

// PrefetchAsk is one model a node is asked to fetch for pending jobs
// backfill plans on it.
type PrefetchAsk struct {
	Model  string `json:"model"`
	Source string `json:"source"`
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size_bytes,omitempty"`
	// Jobs are the pending jobs it is for; Start the earliest of their
	// expected starts. The agent fetches the earliest first.
	Jobs  []string  `json:"jobs"`
	Start time.Time `json:"start"`
}

// A prefetch's state on a node (PrefetchState.State).
const (
	// PrefetchWaiting: not started yet (another prefetch goes first).
	PrefetchWaiting = "waiting"
	// PrefetchFetching: bytes are moving for it.
	PrefetchFetching = "fetching"
	// PrefetchPaused: stopped while a job's fetch of another source runs
	// on the node, to resume after it.
	PrefetchPaused = "paused"
	// PrefetchNoRoom: the cache's budget at prefetch priority has no room
	// for it (a prefetch takes only what is left below cache_low, beside
	// every claim of the fetches in flight, and evicts nothing); Error
	// says how much.
	PrefetchNoRoom = "no-room"
	// PrefetchDone: the node holds the model.
	PrefetchDone = "done"
	// PrefetchFailed: the last attempt failed (Error says why); it is tried
	// again after a while as long as it is asked.
	PrefetchFailed = "failed"
)

// PrefetchState is one prefetch as the agent runs it, in its report and
// its status.
type PrefetchState struct {
	Model  string `json:"model"`
	Source string `json:"source"`
	State  string `json:"state"`
	// Done is bytes of the file on disk (the .part's, when partial); Total
	// its size.
	Done  int64  `json:"bytes_done"`
	Total int64  `json:"bytes_total"`
	Error string `json:"error,omitempty"`
}

// PrefetchBytes counts what a node's prefetches fetched since its agent
// started, and how much of that a job then started with (the Prolog found
// or joined the file). Fetched minus Used is what no job has used.
type PrefetchBytes struct {
	Fetched int64 `json:"fetched_bytes"`
	Used    int64 `json:"used_bytes"`
}

// JobStart is how a job's Prolog found its weights on one node: warm when
// the fast path found them present, cold when it had to hand the job to
// llmgw prolog (to fetch, or to say why not).
type JobStart struct {
	Job   string    `json:"job"`
	Model string    `json:"model"`
	Warm  bool      `json:"warm"`
	Time  time.Time `json:"time"`
}

// PrefetchStatus is one pending job's prefetch, as GET /v1/status shows it.
type PrefetchStatus struct {
	Job   string `json:"job"`
	Model string `json:"model"`
	// Nodes are the planned nodes (a hostlist); Start the expected start.
	Nodes string    `json:"nodes"`
	Start time.Time `json:"start,omitzero"`
	// State is PlanWatching, PlanAsked, PlanWarm or PlanMoved.
	State string `json:"state"`
	// Done and Total are bytes over the planned nodes that lack the model:
	// what they hold of it and what they need.
	Done  int64 `json:"bytes_done"`
	Total int64 `json:"bytes_total"`
	// Why says what holds the prefetch back, when something does (beyond
	// the horizon, no room, not fetchable).
	Why string `json:"why,omitempty"`
	// NodeStates are the planned nodes' own states, each "node=state".
	NodeStates []string `json:"node_states,omitempty"`
	// Warm says the job asked to wait for its weights (--llmgw-warm).
	Warm bool `json:"warm,omitempty"`
}

// A pending job's prefetch state (PrefetchStatus.State).
const (
	// PlanWatching: the plan was seen once, or moved; no node asked yet.
	PlanWatching = "watching"
	// PlanAsked: the plan held for two reads; its nodes are asked.
	PlanAsked = "asked"
	// PlanWarm: every planned node holds the model.
	PlanWarm = "warm"
	// PlanHeld: the plan is outside the horizon or the nodes have no room:
	// see Why.
	PlanHeld = "held"
)

// PrefetchSummary is the prefetcher's state, in GET /v1/status.
type PrefetchSummary struct {
	// Interval is how often it reads the plans (backfill's bf_interval),
	// in seconds; Horizon how far ahead of a start it fetches.
	Interval float64 `json:"interval_seconds"`
	Horizon  float64 `json:"horizon_seconds"`
	// LastRead is when it last read the plans; Error why that failed.
	LastRead time.Time `json:"last_read,omitzero"`
	Error    string    `json:"error,omitempty"`
	// CallsPerMinute is its calls to slurmctld over the last minute.
	CallsPerMinute int `json:"calls_per_minute"`
	// WarmStarts and ColdStarts count the llmgw jobs that started since the
	// coordinator started: warm when the Prolog took the fast path on every
	// node of the job.
	WarmStarts int64 `json:"warm_starts"`
	ColdStarts int64 `json:"cold_starts"`
	// Bytes sums the nodes' PrefetchBytes as they last reported them.
	Bytes PrefetchBytes `json:"bytes"`
	// Jobs are the pending jobs it watches, earliest start first.
	Jobs []PrefetchStatus `json:"jobs"`
	// Starts are the latest counted job starts (at most 256), oldest
	// first, each warm only when every node of the job was.
	Starts []JobStart `json:"starts,omitempty"`
}

// WarmAnswer is GET /v1/prefetch/jobs/{id}: whether a pending job that
// asked to wait for its weights (--llmgw-warm) may start. burst_buffer.lua
// asks it at every stage-in poll (llmgw warm JOB). Ready is true when
// every planned node holds the model, when the job has waited the bound,
// or when there is nothing to wait for (no model, a model never fetched):
// llmgw holds a job only while waiting can pay.
type WarmAnswer struct {
	Job   string `json:"job"`
	Model string `json:"model,omitempty"`
	Nodes string `json:"nodes,omitempty"`
	Ready bool   `json:"ready"`
	// Why says what it waits for, or why it need not.
	Why string `json:"why"`
	// Waited is how long the job has been asked about, in seconds; Bound
	// the longest it is held.
	Waited float64 `json:"waited_seconds"`
	Bound  float64 `json:"bound_seconds"`
}

// Warm asks whether pending job may start; model and nodes, when given,
// are what the caller knows of it (burst_buffer.lua's job_info from 23.02).
func (c *Client) Warm(ctx context.Context, job, model, nodes string) (WarmAnswer, error) {
	q := url.Values{}
	if model != "" {
		q.Set("model", model)
	}
	if nodes != "" {
		q.Set("nodes", nodes)
	}
	path := "/" + Version + "/prefetch/jobs/" + url.PathEscape(job)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out WarmAnswer
	err := c.Do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}
