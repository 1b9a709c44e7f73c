package api

import (
	"context"
	"net/http"
)

// One copy per fabric (issue 18, docs/design.md): the nodes of a fabric that
// fetch one source at one pinned digest form a swarm. One of them, the
// holder of the fabric's origin lease, reads the origin; every other node
// reads chunks from peers of its own fabric, and verifies each chunk against
// a sha256 it got from the coordinator, never from the peer that sent it.
//
// The wire types below are the contract between the agent (the swarm's
// members, agent/ and weights/fetch) and the coordinator (the plans and the
// leases, coordinator/). Fields are only ever added.

// DefaultChunkSize is the size of a swarm chunk: the unit that is verified
// and forwarded. 16 MiB keeps the pipeline short (a chunk reaches the next
// node within a fraction of a second on a fabric link) while a 140 GB model
// is still under 9,000 chunk digests.
const DefaultChunkSize = 16 << 20

// SwarmReport is what a member tells the coordinator about its fetch of one
// source, each time it asks for a plan (POST /v1/swarm). It authenticates as
// the node it names, like a node report.
type SwarmReport struct {
	Node   string `json:"node"`
	Source string `json:"source"`
	// SHA256 is the pinned digest of the whole file: the swarm's key with
	// the node's fabric and the source. A member never joins a swarm for a
	// source without one.
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size_bytes"`
	ChunkSize int64  `json:"chunk_size"`
	// Have is the member's verified chunks, a bitmap (bit i of byte i/8,
	// least significant first), base64 on the wire as Go encodes []byte.
	Have []byte `json:"have"`
	// Sums are digests of chunks this member read from the origin (and so
	// hashed itself), by chunk index, that the coordinator has not yet
	// acknowledged (SwarmPlan.SumsKnown). Only the lease holder's, or a
	// member holding the whole verified file, are taken.
	Sums map[int]string `json:"sums,omitempty"`
	// Complete is set when the member holds the whole file, verified
	// against SHA256: it then serves every chunk.
	Complete bool `json:"complete,omitempty"`
	// FromOrigin and FromPeers are the bytes this member has received for
	// this file so far, verified or not, from the origin and from peers.
	FromOrigin int64 `json:"from_origin_bytes"`
	FromPeers  int64 `json:"from_peers_bytes"`
	// Bad names peers that sent a chunk whose digest did not match; the
	// coordinator drops them from every plan of this swarm and says so in
	// status.
	Bad []string `json:"bad,omitempty"`
	// Unreachable names peers this member could not connect to since its
	// last report.
	Unreachable []string `json:"unreachable,omitempty"`
	// Validator is the origin's ETag (or Last-Modified) the lease holder
	// saw, so that the next holder resumes with If-Range against the same
	// bytes.
	Validator string `json:"validator,omitempty"`
	// Gone is set when the member stops (done, failed or canceled); the
	// coordinator drops it, and its lease if it held it.
	Gone bool `json:"gone,omitempty"`
	// WaitMs, from a member with nothing to read, asks the coordinator to
	// hold its answer until the swarm changes (a digest published, a
	// member verifying a chunk, the lease moving) or WaitMs passes. The
	// member hears of a new chunk at once instead of asking many times a
	// second over the management network. A coordinator that does not
	// know the field answers at once.
	WaitMs int `json:"wait_ms,omitempty"`
}

// SwarmPlan is the coordinator's answer: what the member may read, and from
// whom.
type SwarmPlan struct {
	// Lease is true when this member holds the fabric's origin lease for
	// the swarm: it alone in its fabric reads from the origin, and must
	// report at least every LeaseReport to keep it.
	Lease bool `json:"lease"`
	// Holder is the node that holds the lease, empty when nobody does.
	Holder string `json:"holder,omitempty"`
	// ChunkSize is the swarm's chunk size; a member that asked with another
	// uses this one.
	ChunkSize int64 `json:"chunk_size"`
	// Sums are the chunk digests known so far, by index ("" unknown).
	Sums []string `json:"sums"`
	// SumsKnown is how many of the member's own Sums the coordinator has
	// stored; the member stops resending those.
	SumsKnown int `json:"sums_known"`
	// Peers are the other members, and the complete holders, of this
	// member's own fabric, never of another. Bad peers are left out.
	Peers []SwarmPeer `json:"peers"`
	// Validator is the origin validator the first lease holder saw.
	Validator string `json:"validator,omitempty"`
	// ReportEvery is how often (milliseconds) the member should report.
	ReportEvery int `json:"report_every_ms"`
}

// SwarmPeer is one peer a member may read chunks from.
type SwarmPeer struct {
	Node string `json:"node"`
	// Addr is host:port of the peer's chunk server on the fabric
	// (agent.toml peer_interface or peer_addr).
	Addr string `json:"addr"`
	// Have is its verified chunks, as in SwarmReport.Have.
	Have     []byte `json:"have,omitempty"`
	Complete bool   `json:"complete,omitempty"`
}

// Holds says whether p offers chunk i verified.
func (p SwarmPeer) Holds(i int) bool { return p.Complete || HasChunk(p.Have, i) }

// HasChunk reports whether bitmap have marks chunk i.
func HasChunk(have []byte, i int) bool {
	return i >= 0 && i/8 < len(have) && have[i/8]&(1<<(i%8)) != 0
}

// SetChunk marks chunk i in have, growing it as needed.
func SetChunk(have []byte, i int) []byte {
	for len(have) <= i/8 {
		have = append(have, 0)
	}
	have[i/8] |= 1 << (i % 8)
	return have
}

// Swarm asks for a plan (POST /v1/swarm).
func (c *Client) Swarm(ctx context.Context, r SwarmReport) (SwarmPlan, error) {
	var out SwarmPlan
	err := c.Do(ctx, http.MethodPost, "/"+Version+"/swarm", r, &out)
	return out, err
}

// Peer chunk requests (agent to agent, on the fabric):
//
//	GET /v1/chunks/{sha256}    with a Range header within the file
//	X-Llmgw-Node: n3           the requesting node
//	X-Llmgw-Fabric: ib-b       its fabric
//	Authorization: MUNGE <credential of PeerMungePayload>
//
// The serving agent answers only a uid-0 (or agent-user) credential whose
// fabric is its own, only from its cache directory, and only with verified
// bytes: 206 with the range, or 416 when a chunk of the range is not
// verified there (yet).
//
//	GET /v1/chunks/{sha256}?live=1    Range exactly one chunk
//
// asks the origin lease holder for the chunk it is reading from the origin
// now, before it is verified: 206, the bytes so far and then the rest as
// the origin delivers them, a body cut short when the origin read breaks;
// 416 from any node that is not reading exactly that chunk from the origin
// (a relay never answers it). The reader keeps the bytes in memory and
// writes or serves them only once they match the chunk's digest from the
// coordinator: cut-through of the last chunk saves the fabric a chunk's
// transfer after the origin's last byte.
const (
	PeerNodeHeader   = "X-Llmgw-Node"
	PeerFabricHeader = "X-Llmgw-Fabric"
)

// PeerMungePayload is what a peer request's credential carries, so that a
// credential cannot be moved to another request, node, fabric or peer: host
// is the peer's address as dialed (the request's Host), which the serving
// agent checks is its own.
func PeerMungePayload(method, host, requestURI, node, fabric, rangeHeader string) []byte {
	return MungePayload(method, host+"\n"+requestURI+"\n"+node+"\n"+fabric+"\n"+rangeHeader, nil)
}
