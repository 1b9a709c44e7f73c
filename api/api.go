// Package api is the protocol llmgw's processes speak to one another: the
// request and response types of the coordinator's HTTP API and of the agent's
// local socket, the error shape both return, and the clients for them.
//
// It is a leaf on purpose: the agent and the command line link it without
// linking any server code, so an agent never depends on the coordinator's
// database driver. It does link net/http, so code that must start in a few
// milliseconds takes the name rules and the node-local catalog copy from
// weights/catalog, which links neither.
package api

import (
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Version is the API's path prefix. A breaking change gets a new one; fields
// are only ever added to the types below.
const Version = "v1"

// Report is what an agent tells the coordinator about its node, whole, each
// time. The coordinator replaces what it knew of the node with it, so a lost
// report costs nothing but freshness.
type Report struct {
	// ID identifies this report (a UUID), for logs and for dropping a replay.
	ID string `json:"id"`
	// Seq increases by one per report from one agent process; with Started it
	// lets the coordinator drop a report that arrives after a newer one.
	Seq int64 `json:"seq"`
	// Started is when the agent process started.
	Started time.Time `json:"started"`
	// Time is when the report was made.
	Time time.Time `json:"time"`

	Node string `json:"node"`
	// Fabric is the network the node is on; empty means DefaultFabric.
	Fabric string `json:"fabric"`
	// Looked is false when the node has no weight directories configured. It
	// must rank exactly like a node that looked and found nothing: turning
	// the feature on for one node must not push jobs off every other.
	Looked bool `json:"looked"`

	Weights []Weight    `json:"weights"`
	Dirs    []DirStatus `json:"dirs,omitempty"`
	Cache   Cache       `json:"cache"`
	// HFCache is the node's Hugging Face cache (agent.toml's hf_cache),
	// where Hub models are fetched, when it is on another filesystem than
	// Cache (a site's shared cache on a filer): placement checks a Hub
	// model's fetch against its room, not the cache's. An agent sends it
	// only while its catalog holds a Hub model, so a coordinator older
	// than Hub models (which decodes strictly) never receives it.
	HFCache *Cache  `json:"hf_cache,omitempty"`
	Fetches []Fetch `json:"fetches,omitempty"`
	// GPUMemory is the node's total GPU memory in bytes (all its GPUs), from
	// the agent's gpu_memory setting, else nvidia-smi; 0 when unknown, and
	// placement then skips the memory check for the node.
	GPUMemory int64 `json:"gpu_memory_bytes,omitempty"`
	// Errors are recent problems the agent wants an operator to see, newest
	// last, already bounded by the agent.
	Errors       []string `json:"errors,omitempty"`
	AgentVersion string   `json:"agent_version"`
	// GCHeld says why this node's gc removes nothing: its catalog copy is
	// not the catalog it trusts (another identity, or one that does not
	// descend from it); GCHeldSince is since when. Empty while it trusts
	// the catalog. 'llmgw gc --trust' lifts it.
	GCHeld      string    `json:"gc_held,omitempty"`
	GCHeldSince time.Time `json:"gc_held_since,omitzero"`
	// PeerAddr is host:port of the node's chunk server on its fabric
	// (agent.toml peer_interface or peer_addr), empty when it serves none.
	// The coordinator gives it only to nodes of the same fabric.
	PeerAddr string `json:"peer_addr,omitempty"`
	// Prefetches are the prefetches the node runs or holds (issue 28);
	// PrefetchBytes what they fetched and what jobs used of it.
	Prefetches    []PrefetchState `json:"prefetches,omitempty"`
	PrefetchBytes *PrefetchBytes  `json:"prefetch_bytes,omitempty"`
	// Starts are the llmgw jobs whose Prolog ran on the node since the
	// last report the coordinator took, and whether each found its
	// weights on the fast path; bounded by the agent.
	Starts []JobStart `json:"starts,omitempty"`
}

// DefaultFabric is the fabric of a node that names none; see
// catalog.DefaultFabric.
const DefaultFabric = catalog.DefaultFabric

// Weight is one model a node can see (scan.Local on the wire).
type Weight struct {
	Path     string `json:"path"`
	Size     int64  `json:"size_bytes"`
	Shared   bool   `json:"shared"`
	Complete bool   `json:"complete"`
	Problem  string `json:"problem,omitempty"`
	ModelID  string `json:"model_id,omitempty"`
	Revision string `json:"revision,omitempty"`
}

// DirStatus is what one configured weight directory looked like.
type DirStatus struct {
	Path    string `json:"path"`
	Shared  bool   `json:"shared"`
	FSType  string `json:"fs_type,omitempty"`
	Missing bool   `json:"missing,omitempty"`
	Error   string `json:"error,omitempty"`
	Skipped int    `json:"skipped,omitempty"`
}

// Cache is the node's fetch cache: where, and how much room it has.
type Cache struct {
	Dir        string `json:"dir,omitempty"`
	FreeBytes  int64  `json:"free_bytes"`
	TotalBytes int64  `json:"total_bytes"`
}

// Fetch is one fetch in progress on a node.
type Fetch struct {
	Source string `json:"source"`
	Done   int64  `json:"bytes_done"`
	// Total is -1 when the origin did not say.
	Total int64 `json:"bytes_total"`
	// Rate is bytes per second over the last few seconds.
	Rate    float64   `json:"rate_bytes_per_second"`
	Started time.Time `json:"started"`
	// Progressed is when the last byte arrived. A fetch whose Progressed is
	// old is stuck, not slow; that difference is what status exists to show.
	Progressed time.Time `json:"progressed"`
	// Prefetch says no job waits for this fetch: it runs ahead of a
	// pending job backfill plans on the node (issue 28), below any fetch
	// a job's Prolog waits for.
	Prefetch bool `json:"prefetch,omitempty"`
}

// Model is one catalog entry; the type lives in the leaf weights/catalog,
// so the node-local catalog copy can be read without linking net/http.
type Model = catalog.Model

// File is one file of a model made of several (Model.Files).
type File = catalog.File

// Models is the catalog as GET /v1/models returns it.
type Models struct {
	Models []Model `json:"models"`
	// CatalogID is the catalog's identity, made once with the
	// coordinator's database; Generation counts every change to it. A
	// node refuses to collect its cache against a catalog whose identity
	// changed or whose generation went backwards (weights/gc). Both are
	// empty from a coordinator older than them.
	CatalogID  string `json:"catalog_id,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// History are the ids of the catalog's recent changes, newest first:
	// a node trusts a catalog whose history holds the change it last
	// trusted (a restored database cannot show the changes made after its
	// backup, however many it makes since). Empty from an older
	// coordinator, whose generation alone is then compared.
	History []string `json:"history,omitempty"`
	// Superseded are cache names an admin's own change dropped from a
	// model (models add over an entry, models rm), with that model: nodes
	// remove them without counting them against gc_max_share.
	Superseded map[string]string `json:"superseded,omitempty"`
	// Trusted, when set, is the change an admin adopted with `llmgw gc
	// --trust`, at TrustedAt: a node that distrusts the catalog adopts it
	// when its distrust began before TrustedAt.
	Trusted   string    `json:"trusted_change,omitempty"`
	TrustedAt time.Time `json:"trusted_at,omitzero"`
}
