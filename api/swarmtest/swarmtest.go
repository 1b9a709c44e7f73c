package swarmtest

// Node is the other way to play a hostile node (member.go's Member runs
// one whole misbehaviour on its own): single requests, each what the test
// says, for the minimal forms of issue 24's review. A node report with the
// fabric it claims, a swarm report of its choosing, a chunk request whose
// headers name another node or fabric than its credential's host: what
// root on that node can send, its credentials from its own host's munged.

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
)

// Node is one hostile node: its name, the fabric it claims, its host's
// munged, and its client of the coordinator.
type Node struct {
	Name   string
	Fabric string
	// Codec is its host's munged: its credentials carry the host's origin
	// address, whatever the requests say.
	Codec munge.Codec
	// Coord is the coordinator as the node reaches it.
	Coord *api.Client
	// PeerAddr is the chunk server address its reports give ("" none).
	PeerAddr string
	seq      atomic.Int64
}

// New is a node that signs with codec and reports to the coordinator at
// url with MUNGE credentials.
func New(url, name, fabric string, codec munge.Codec) *Node {
	return &Node{Name: name, Fabric: fabric, Codec: codec, Coord: &api.Client{BaseURL: url, Auth: munge.Authenticator{Codec: codec}}}
}

// Report sends a node report as an agent's: its fabric and peer address as
// n says, an empty cache, nothing held.
func (n *Node) Report(ctx context.Context) (api.ReportAnswer, error) {
	now := time.Now()
	r := &api.Report{ID: uuid.NewString(), Seq: n.seq.Add(1), Started: now, Time: now, Node: n.Name, Fabric: n.Fabric,
		Looked: true, Weights: []api.Weight{}, AgentVersion: "swarmtest", PeerAddr: n.PeerAddr,
		Cache: api.Cache{Dir: "/var/cache/llmgw", FreeBytes: 1e12, TotalBytes: 2e12}}
	return n.Coord.PostReport(ctx, r)
}

// Swarm sends r as n's swarm report (r.Node is set to n's name when empty).
func (n *Node) Swarm(ctx context.Context, r api.SwarmReport) (api.SwarmPlan, error) {
	if r.Node == "" {
		r.Node = n.Name
	}
	return n.Coord.Swarm(ctx, r)
}

// Claim is what a chunk request's headers say of its sender; empty fields
// are n's own.
type Claim struct{ Node, Fabric string }

// Chunk asks the chunk server at addr for bytes from..to of file sum, with
// a credential from n's host made for exactly this request and the claim's
// headers, as a peer's read (api.PeerMungePayload).
func (n *Node) Chunk(ctx context.Context, addr, sum string, from, to int64, c Claim) (*http.Response, error) {
	if c.Node == "" {
		c.Node = n.Name
	}
	if c.Fabric == "" {
		c.Fabric = n.Fabric
	}
	uri := "/" + api.Version + "/chunks/" + sum
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+uri, nil)
	if err != nil {
		return nil, err
	}
	rng := fmt.Sprintf("bytes=%d-%d", from, to)
	req.Header.Set("Range", rng)
	req.Header.Set(api.PeerNodeHeader, c.Node)
	req.Header.Set(api.PeerFabricHeader, c.Fabric)
	cred, err := n.Codec.Encode(ctx, api.PeerMungePayload(http.MethodGet, addr, uri, c.Node, c.Fabric, rng))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", api.MungeScheme+" "+cred)
	return http.DefaultClient.Do(req)
}
