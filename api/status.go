package api

import "time"

// Status is what GET /v1/status answers: for every catalog model and every
// fabric, whether the fabric can serve the model without fetching, and how.
//
// Fabrics are not connected to one another, so presence is only ever
// answered per fabric. One shared filer answers "can this fabric serve it"
// the same as twenty local copies; Serve says which of the two it is.
//
// The JSON is stable: fields are only added. Lists are sorted (models,
// fabrics and node names by name) so two answers over the same state are the
// same bytes apart from Generated.
type Status struct {
	// Generated is when the coordinator computed the answer (its clock).
	Generated time.Time `json:"generated"`
	// ReportInterval is how often agents are expected to report, in seconds;
	// a node is stale after StaleAfter seconds without a report.
	ReportInterval float64 `json:"report_interval_seconds"`
	StaleAfter     float64 `json:"stale_after_seconds"`
	// StallAfter is how long a fetch may go without a byte before it is
	// called stalled rather than slow, in seconds.
	StallAfter float64 `json:"stall_after_seconds"`

	// Nodes counts the nodes the coordinator has heard from, by state.
	Nodes NodeCounts `json:"nodes"`
	// Fabrics lists every fabric a node has reported, with its node counts.
	Fabrics []FabricNodes `json:"fabrics"`
	// FabricsFrom says where nodes' fabrics come from: FabricsFromSlurm
	// (coordinator.toml fabric_features: a node's feature in Slurm) or
	// FabricsFromNodes (each agent's own word). Empty from a coordinator
	// that does not say.
	FabricsFrom string `json:"fabrics_from,omitempty"`
	// Models has one entry per catalog model, in name order.
	Models []ModelStatus `json:"models"`
	// Features is the Slurm feature reconciler's state; nil when it is off.
	Features *FeatureStatus `json:"features,omitempty"`
	// Swarms are the swarms the coordinator keeps (fetches through a
	// fabric's peers), by fabric, model and source.
	Swarms []SwarmStatus `json:"swarms,omitempty"`
	// SwarmBytes is, per fabric, what swarm members received from the
	// origin and from peers since the coordinator started, swarms that
	// ended included: the share the site's uplink carried.
	SwarmBytes []FabricSwarmBytes `json:"swarm_bytes,omitempty"`
	// Seeds are the seed requests still asking nodes (llmgw seed), oldest
	// first, each with only the nodes still asked.
	Seeds []SeedStatus `json:"seeds,omitempty"`
	// GCHeld groups the fresh nodes whose gc is held by a catalog they do
	// not trust, by reason, largest group first: a coordinator restored or
	// moved makes every node refuse to collect, and that must not be
	// silent. 'llmgw gc --trust' lifts it.
	GCHeld []GCHeldGroup `json:"gc_held,omitempty"`
	// Prefetch is the prefetcher's state (issue 28); nil when it is off.
	Prefetch *PrefetchSummary `json:"prefetch,omitempty"`
}

// GCHeldGroup is the nodes whose gc is held for one reason.
type GCHeldGroup struct {
	// Why is the reason as the nodes gave it, with the node-specific parts
	// (the coordinator's URL, identities) left as the first node said.
	Why string `json:"why"`
	// Since is when the first of them began to hold.
	Since time.Time `json:"since"`
	// Nodes is their hostlist, Count their number.
	Nodes string `json:"nodes"`
	Count int    `json:"count"`
}

// Where nodes' fabrics come from (Status.FabricsFrom).
const (
	FabricsFromSlurm = "slurm"
	FabricsFromNodes = "nodes"
)

// Node states. A node is stale when it has missed three report intervals:
// what it last said may no longer be true, so it does not count as a holder.
// A never-looked node reports but has no weight directories configured; it
// ranks exactly like a node that looked and found nothing.
const (
	NodeOK          = "ok"
	NodeStale       = "stale"
	NodeNeverLooked = "never-looked"
)

// How a fabric or a node holds a model. Shared means on a network filesystem
// (one copy, seen by many); local means a copy on the node's own disk.
const (
	HoldShared = "shared"
	HoldLocal  = "local"
	HoldNone   = "none"
)

// NodeCounts counts nodes by state. Total = OK + Stale + NeverLooked.
type NodeCounts struct {
	Total       int `json:"total"`
	OK          int `json:"ok"`
	Stale       int `json:"stale"`
	NeverLooked int `json:"never_looked"`
}

// FabricNodes is one fabric's nodes by state, as hostlists ("n[1-4,7]").
type FabricNodes struct {
	Fabric string     `json:"fabric"`
	Counts NodeCounts `json:"counts"`
	// Stale and NeverLooked are hostlists of the nodes in that state.
	Stale       string `json:"stale,omitempty"`
	NeverLooked string `json:"never_looked,omitempty"`
}

// ModelStatus is one catalog model across every fabric.
type ModelStatus struct {
	Model   Model            `json:"model"`
	Fabrics []FabricPresence `json:"fabrics"`
}

// FabricPresence answers "can this fabric serve the model" for one fabric.
type FabricPresence struct {
	Fabric string `json:"fabric"`
	// Serve is HoldShared when a fresh node in the fabric sees a complete
	// copy on a shared filesystem, else HoldLocal when one holds a local
	// copy, else HoldNone. Stale nodes never count.
	Serve string `json:"serve"`
	// SharedNodes and LocalNodes count fresh nodes holding a complete copy
	// each way; Holders is their hostlist.
	SharedNodes int    `json:"shared_nodes"`
	LocalNodes  int    `json:"local_nodes"`
	Holders     string `json:"holders,omitempty"`
	// FetchBytes is what a job placed in this fabric would fetch when Serve
	// is HoldNone: the catalog size, else the largest complete copy seen
	// anywhere, else -1 when nobody knows. Zero when the fabric holds it.
	FetchBytes int64 `json:"fetch_bytes"`
	// Fetchable is false when Serve is HoldNone and no job could fetch it:
	// a path source is checked, never fetched, and a bare model id is left
	// to the engine.
	Fetchable bool `json:"fetchable"`
	// Fetching lists fetches of this model in progress on the fabric's nodes.
	Fetching []FetchStatus `json:"fetching,omitempty"`
}

// FetchStatus is one fetch in progress as the coordinator last heard of it.
type FetchStatus struct {
	Node   string `json:"node"`
	Source string `json:"source"`
	Done   int64  `json:"bytes_done"`
	// Total is -1 when the origin did not say; Percent is then -1 too.
	Total   int64   `json:"bytes_total"`
	Percent float64 `json:"percent"`
	// Rate is bytes per second as the agent measured it.
	Rate float64 `json:"rate_bytes_per_second"`
	// ETA is the seconds left at Rate, -1 when unknown (no total, no rate,
	// or stalled).
	ETA float64 `json:"eta_seconds"`
	// SinceProgress is how long, in seconds, since the last byte arrived,
	// as of Generated.
	SinceProgress float64 `json:"since_progress_seconds"`
	// Stalled is true when SinceProgress is over the stall threshold: the
	// fetch is stuck, not slow.
	Stalled bool `json:"stalled"`
}

// ModelNodes is what GET /v1/status/{model} answers: the fabric summary and
// then every node the coordinator knows, one by one, with what it holds of
// the model. The Slurm prolog and placement read it.
type ModelNodes struct {
	Generated      time.Time        `json:"generated"`
	ReportInterval float64          `json:"report_interval_seconds"`
	StaleAfter     float64          `json:"stale_after_seconds"`
	StallAfter     float64          `json:"stall_after_seconds"`
	Model          Model            `json:"model"`
	Fabrics        []FabricPresence `json:"fabrics"`
	Nodes          []NodePresence   `json:"nodes"`
}

// NodePresence is one node's view of one model.
type NodePresence struct {
	Node   string `json:"node"`
	Fabric string `json:"fabric"`
	// State is NodeOK, NodeStale or NodeNeverLooked.
	State string `json:"state"`
	// Holds is HoldShared, HoldLocal or HoldNone. It is what the node last
	// reported even when the node is stale; check State before trusting it.
	Holds string `json:"holds"`
	// Path is where the node sees the complete weights ("" with HoldNone).
	Path string `json:"path,omitempty"`
	Size int64  `json:"size_bytes,omitempty"`
	// Incomplete is set when the node sees only an incomplete copy (a
	// missing shard), with the agent's reason; it does not count as held.
	Incomplete string `json:"incomplete,omitempty"`
	// CacheFree and CacheTotal are the room in bytes where the node
	// fetches this model: its fetch cache, or a Hub model's Hugging Face
	// cache when that is on a filesystem of its own (a filer's).
	CacheFree  int64 `json:"cache_free_bytes"`
	CacheTotal int64 `json:"cache_total_bytes"`
	// LastReport is when the coordinator last heard from the node (its
	// clock); Age is how long before Generated that was, in seconds.
	LastReport time.Time `json:"last_report"`
	Age        float64   `json:"age_seconds"`
	// Fetch is this model's fetch in progress on the node, if any.
	Fetch        *FetchStatus `json:"fetch,omitempty"`
	AgentVersion string       `json:"agent_version,omitempty"`
	// Errors are the newest few problems the agent last reported, newest
	// last.
	Errors []string `json:"errors,omitempty"`
}
