// Package swarmtest speaks the swarm's protocols (api/swarm.go) as a node
// that says whatever it likes: its node reports, swarm reports and chunk
// requests carry credentials from its own host's munged (or its own token),
// which is what root on that node can send, and nothing more. Tests play
// the liars of issue 24 with it (a fabric it is not in, a size or chunk
// size of its own, made-up digests, progress it did not make, a validator
// it made up, a chunk server that refuses what it claims), and the liars
// benchmark (scripts/bench/fanout.sh --liars) is to reuse it.
//
// It is for tests only: nothing in llmgw's binaries imports it.
package swarmtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/internal/munge"
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

// Refusing is a chunk server that answers every request with status: a
// member that claims chunks and serves none (503 "busy" for ever, 404, 416).
// Close stops it.
type Refusing struct {
	Addr   string
	Status int
	Asked  atomic.Int64
	srv    *http.Server
}

// Refuse serves status on a listener at addr (host:0 picks a port).
func Refuse(addr string, status int) (*Refusing, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Refusing{Addr: l.Addr().String(), Status: status}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.Asked.Add(1)
		http.Error(w, http.StatusText(r.Status), r.Status)
	})}
	go r.srv.Serve(l)
	return r, nil
}

// Close stops the server.
func (r *Refusing) Close() error { return r.srv.Close() }

// MadeUp is a digest list no file has: chunks digests of n's choosing,
// all different.
func MadeUp(chunks int, seed byte) map[int]string {
	out := make(map[int]string, chunks)
	for i := range chunks {
		out[i] = fmt.Sprintf("%02x%062x", seed, i+1)
	}
	return out
}
