package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Placement is what GET /v1/placement answers: every candidate node ranked
// for a job that wants a model, best first, with a reason for each. It
// never refuses: when nobody holds the model, nodes with room to fetch it
// lead. The JSON is stable: fields are only added.
type Placement struct {
	Generated time.Time `json:"generated"`
	Model     Model     `json:"model"`
	// Count is the number of nodes the job wants (sbatch -N).
	Count int `json:"count"`
	// FetchBytes is what a node without the model would fetch: the catalog
	// size, else the largest complete copy seen, else -1 (unknown, and the
	// disk check is skipped).
	FetchBytes int64 `json:"fetch_bytes"`
	// Nodes is every candidate, best first; with Count > 1 grouped by
	// fabric in the order of Fabrics.
	Nodes []PlacementNode `json:"nodes"`
	// Fabrics is the candidate fabrics in the order a job should try them.
	Fabrics []PlacementFabric `json:"fabrics"`
	// Choice is the nodes to use: the first Count usable nodes of the first
	// fabric that has enough. Empty when none has.
	Choice []string `json:"choice"`
	// Note says what matters about the whole answer, e.g. that nobody
	// holds the model and a job fetches it.
	Note string `json:"note,omitempty"`
	// View is Slurm's nodes as the feature reconciler last read them, when
	// the query asked for it (view=1) and the reconciler runs; nil
	// otherwise. llmgw sbatch composes from it instead of asking slurmctld.
	View *FeatureView `json:"view,omitempty"`
}

// FeatureView is Slurm's nodes as the coordinator's feature reconciler last
// read them (as SlurmUser, whom slurmctld's rate limit exempts), with the
// features it set since: what a job's --constraint and --prefer match.
type FeatureView struct {
	// Synced is when the sync that read them began.
	Synced time.Time `json:"synced"`
	// Default is the default partition; empty when there is none or it
	// could not be read.
	Default string            `json:"default_partition,omitempty"`
	Nodes   []FeatureViewNode `json:"nodes"`
}

// FeatureViewNode is one node of a FeatureView: its partitions and its
// active features.
type FeatureViewNode struct {
	Name       string   `json:"name"`
	Partitions []string `json:"partitions,omitempty"`
	Features   []string `json:"features,omitempty"`
}

// Placement tiers, best first (PlacementNode.Tier). A node in one of the
// first five is usable; the sbatch helper excludes only NoRoom nodes.
const (
	TierHoldsLocal    = "holds-local"
	TierHoldsShared   = "holds-shared"
	TierFetching      = "fetching"
	TierHasRoom       = "has-room"
	TierUnchecked     = "unchecked"
	TierNoRoom        = "no-room"
	TierStale         = "stale"
	TierUnschedulable = "not-schedulable"
	TierGPUMemory     = "gpu-memory"
)

// Check results (PlacementCheck.Result). A skipped check never counts
// against a node.
const (
	CheckPass = "pass"
	CheckFail = "fail"
	CheckSkip = "skip"
)

// NodeUnreported is PlacementNode.State for a node asked about that no
// agent has reported from.
const NodeUnreported = "unreported"

// PlacementNode is one node's place in the ranking.
type PlacementNode struct {
	Node   string `json:"node"`
	Fabric string `json:"fabric"`
	// Rank is 1 for the best node.
	Rank int    `json:"rank"`
	Tier string `json:"tier"`
	// Usable is true when nothing known says a job there would fail.
	Usable bool `json:"usable"`
	// State is NodeOK, NodeStale, NodeNeverLooked or NodeUnreported.
	State string `json:"state"`
	// SlurmState is the node's Slurm state as the coordinator last read
	// it, "" when unknown (which counts as schedulable).
	SlurmState string `json:"slurm_state,omitempty"`
	// Holds is how the node last said it holds the model (HoldLocal,
	// HoldShared, HoldNone), fresh or not; Path is where.
	Holds string `json:"holds"`
	Path  string `json:"path,omitempty"`
	// Holder is true when the node counts as a holder: a complete copy, a
	// fresh report, and Slurm would start a job there.
	Holder bool `json:"holder"`
	// NoRoom is true when the node does not hold the model and its cache
	// lacks the room to fetch it (the disk check failed): a job there
	// would fail its fetch, so `llmgw sbatch` excludes it.
	NoRoom bool `json:"no_room"`
	// Memory and Disk are the two checks, shaped alike. The disk check is
	// skipped on a node that holds the weights.
	Memory PlacementCheck `json:"memory"`
	Disk   PlacementCheck `json:"disk"`
	// Fetch is the model's fetch in progress on the node, if any.
	Fetch  *FetchStatus `json:"fetch,omitempty"`
	Reason string       `json:"reason"`
}

// PlacementCheck is one check on one node. NeedBytes and HaveBytes are 0
// when unknown.
type PlacementCheck struct {
	Result    string `json:"result"`
	NeedBytes int64  `json:"need_bytes"`
	HaveBytes int64  `json:"have_bytes"`
	Reason    string `json:"reason"`
}

// PlacementFabric is one fabric as a job of Count nodes weighs it.
type PlacementFabric struct {
	Fabric string `json:"fabric"`
	// Holders counts its usable nodes that hold the model, LocalHolders
	// those with a local copy; Usable counts its usable nodes.
	Holders      int    `json:"holders"`
	LocalHolders int    `json:"local_holders"`
	Usable       int    `json:"usable"`
	Enough       bool   `json:"enough"`
	Reason       string `json:"reason"`
}

// PlacementQuery is what to rank.
type PlacementQuery struct {
	Model string
	// Count is the number of nodes wanted; 0 means 1.
	Count int
	// Nodes is a Slurm hostlist ("n[1-4],gpu7") of the candidates, e.g. a
	// partition's nodes as `sinfo -h -p P -o %N` prints them. Empty means
	// every node the coordinator knows.
	Nodes string
	// View asks for the reconciler's view of Slurm's nodes (Placement.View).
	View bool
}

// Placement ranks nodes for a job that wants q.Model. An unknown model is
// an *Error with CodeNotFound. `llmgw place` and `llmgw sbatch` call it.
func (c *Client) Placement(ctx context.Context, q PlacementQuery) (*Placement, error) {
	v := url.Values{"model": {q.Model}}
	if q.Count > 0 {
		v.Set("count", strconv.Itoa(q.Count))
	}
	if q.Nodes != "" {
		v.Set("nodes", q.Nodes)
	}
	if q.View {
		v.Set("view", "1")
	}
	var out Placement
	if err := c.Do(ctx, http.MethodGet, "/v1/placement?"+v.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
