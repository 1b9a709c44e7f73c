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
	// source without one. For a model of several files (a Hub model, a set
	// of pinned files) fetched as one revision, Source is the model's and
	// SHA256 and Size are its revision's (catalog.RevisionDigest, the sum
	// of its files' sizes): its files end to end are the swarm's bytes.
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size_bytes"`
	ChunkSize int64  `json:"chunk_size"`
	// Have is the member's verified chunks, a bitmap (bit i of byte i/8,
	// least significant first), base64 on the wire as Go encodes []byte.
	Have []byte `json:"have"`
	// Sums are digests of chunks this member read from the origin (and so
	// hashed itself), by chunk index, that the coordinator has not yet
	// acknowledged (SwarmPlan.SumsKnown); all of them again when the plan's
	// Instance changes (a restarted coordinator knows none). They are taken
	// from a member that holds or held the swarm's origin lease, and from
	// any member in the first seconds of a coordinator's swarm traffic (the
	// resends after a restart); no other member's, complete or not. Two
	// readers that disagree on a chunk freeze it (no digest published) until
	// a second origin read agrees with one of them; once the catalog records
	// the file's digest list (SwarmPlan.Recorded), no report changes it.
	Sums map[int]string `json:"sums,omitempty"`
	// Complete is set when the member holds the whole file, verified
	// against SHA256: it then serves every chunk.
	Complete bool `json:"complete,omitempty"`
	// FromOrigin and FromPeers are the bytes this member has received for
	// this file so far, verified or not, from the origin and from peers.
	FromOrigin int64 `json:"from_origin_bytes"`
	FromPeers  int64 `json:"from_peers_bytes"`
	// OriginDiscarded is the part of FromOrigin this member dropped: the
	// bytes of a chunk whose origin read broke off before its last byte
	// (the next read starts at that chunk again). FromOrigin less this is
	// the origin bytes of chunks it landed and of the chunk it is reading,
	// which tells the coordinator when a lease holder's digest is due.
	OriginDiscarded int64 `json:"origin_discarded_bytes,omitempty"`
	// Bad names peers that sent a chunk whose digest did not match; the
	// coordinator drops them from every plan of this swarm and says so in
	// status.
	Bad []string `json:"bad,omitempty"`
	// Unreachable names peers this member could not connect to since its
	// last report.
	Unreachable []string `json:"unreachable,omitempty"`
	// Validator is the origin's ETag (or Last-Modified) this member saw on
	// its origin reads. Only the lease holder's counts, and only once it has
	// published a digest under its lease (SwarmPlan.Validator).
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
	// Mismatch, from a member whose file, every chunk verified, did not
	// match the pin, is the digest list it verified the chunks it read
	// from peers against, by chunk index ("" for a chunk it read from the
	// origin itself, whose digest is its own). The coordinator knows who
	// published each digest: a digest it still publishes on one origin
	// reader's word is that reader's, which then loses its digests, the
	// lease and its place as a reader and a peer in this swarm, so that
	// the member's next read proceeds (a lease holder that made up its
	// digests and served matching bytes passes every chunk check and
	// fails only the whole file's). Sent until a plan answers it.
	Mismatch []string `json:"mismatch,omitempty"`
	// MembersVersion is the SwarmPlan.MembersVersion of the Members this
	// member holds (0: none): a plan leaves Members out when they are
	// still those (docs/design.md "The swarm").
	MembersVersion uint64 `json:"members_version,omitempty"`
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
	// ChunkSize is the swarm's chunk size: the coordinator's
	// (swarm_min_chunk, DefaultChunkSize unless configured), never a
	// member's. A member that asked with another and holds nothing uses
	// this one; a report with another chunk size that marks chunks (Have,
	// Sums) is refused, as is one whose size_bytes or sha256 is not the
	// catalog's for the source: a swarm exists only for a catalog file.
	ChunkSize int64 `json:"chunk_size"`
	// Sums are the chunk digests known so far, by index ("" unknown).
	Sums []string `json:"sums"`
	// SumsKnown is how many of the member's own Sums the coordinator has
	// stored; the member stops resending those.
	SumsKnown int `json:"sums_known"`
	// Peers are the other members, and the complete holders, of this
	// member's own fabric, never of another, that hold a verified chunk,
	// and the lease holder even before it has verified one (so that a
	// member caught up with it probes it, and a dead seed is found within
	// the 2 s the design allows). Bad peers are left out.
	Peers []SwarmPeer `json:"peers"`
	// Validator is the origin's validator as the lease holder that last
	// published a digest under its lease saw it, for a later holder's
	// If-Range. It is no holder's for life: a holder whose If-Range is
	// answered with the whole file (200: another version, or a CDN edge
	// that names the same bytes otherwise) drops it, reads the origin from
	// the range's start with no If-Range, and reports the validator it got,
	// which replaces this one once it publishes a digest. The pinned sha256,
	// checked chunk by chunk and whole, is what guards the bytes.
	Validator string `json:"validator,omitempty"`
	// ReportEvery is how often (milliseconds) the member should report.
	ReportEvery int `json:"report_every_ms"`

	// Instance names the coordinator process that made the plan (a random
	// id made at its start). A member that sees it change resends every
	// digest it computed from origin bytes (SwarmReport.Sums): the
	// coordinator keeps swarms in memory only, and without the resends a
	// restart cost a late joiner the chunks already read.
	Instance string `json:"instance,omitempty"`
	// Recorded says Sums are the file's digest list as the catalog records
	// it with the pin (once two members verified the whole file against
	// the pin with the same list): final, whatever a member reports.
	Recorded bool `json:"recorded,omitempty"`
	// Members are every member of this member's fabric's swarm, itself
	// included, verified chunks or not, with the addresses the coordinator
	// binds their credentials to: what a chunk server serves. A chunk
	// server answers only a request whose credential's node
	// (X-Llmgw-Node) is one of the Members of its latest plan for the file,
	// and, when AddrsBound, whose MUNGE origin address is one of that
	// member's Addrs. A request from a node its plan does not list yet (a
	// member that joined since) makes the server ask for a plan again
	// before it answers: a reader that has verified nothing is served.
	Members []SwarmMember `json:"members,omitempty"`
	// AddrsBound says the coordinator knows where each node's credentials
	// come from (Slurm's node list: munge_socket or fabric_features is set):
	// a member with no Addrs is then served by nobody. False (no node
	// list), the node name is all a chunk server can check, and
	// `llmgw doctor` says so.
	AddrsBound bool `json:"addrs_bound,omitempty"`
	// MembersVersion names Members' content (a hash of the list): a
	// report that gives it back (SwarmReport.MembersVersion) is answered
	// without Members, which are then unchanged. The list goes out in
	// every plan otherwise; a member that does not send the field (older)
	// gets it every time.
	MembersVersion uint64 `json:"members_version,omitempty"`
}

// SwarmMember is one member of a swarm as a chunk server checks it.
type SwarmMember struct {
	Node string `json:"node"`
	// Addrs are the node's addresses as the coordinator resolved them from
	// Slurm's NodeAddr and NodeHostname: the origins its munged's
	// credentials may carry.
	Addrs []string `json:"addrs,omitempty"`
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
//	GET /v1/chunks/{sha256}    Range: bytes=A-B, exactly one chunk
//	X-Llmgw-Node: n3           the requesting node
//	X-Llmgw-Fabric: ib-b       its fabric
//	Authorization: MUNGE <credential of PeerMungePayload>
//
// Who is served: a uid-0 (or agent-user) credential made for exactly this
// request to this server, from a node whose fabric header is the server's
// own, that the server's latest plan of the file's swarm lists as a member
// (SwarmPlan.Members), and, when the plan binds addresses
// (SwarmPlan.AddrsBound), whose credential's origin address is one of that
// member's; a node the plan does not list makes the server ask the
// coordinator for a plan first (at most every 250 ms), so a member that
// joined since, with nothing verified, is served. Anyone else: 403.
//
// A request covers exactly one chunk of the swarm's chunk size (the last
// one shorter); for a file the holder fetched outside a swarm, whose chunk
// size it does not know, a range of at most 64 MiB on a boundary of its own
// length, or the file's tail. Anything else, or a chunk not verified there
// (yet): 416. Only verified bytes are served, from the cache directory,
// each checked first to be the file that was verified (inode; size and
// mtime once complete). The answers:
//
//   - 206 with the chunk, written under deadlines (each write within 2 s,
//     the whole within 2 s plus its size at 1 MiB/s): a reader that does
//     not read is cut off.
//
//   - 503 with Retry-After when busy: the server's 8 upload slots, or the
//     3 a node may hold at once, are taken, or the file is being renamed
//     into place. A reader leaves the holder alone a second and asks
//     another; a 503 without Retry-After, a 404 or a 416 for a chunk the
//     plan says the peer holds is a failed read, reported.
//
//   - 404 when the file is not held here, or no longer: removed or
//     replaced since it was verified. It is then dropped and withdrawn
//     from its swarm (a Gone report).
//
// The live route,
//
//	GET /v1/chunks/{sha256}?live=1    Range exactly one chunk
//
// asks the origin lease holder for the chunk it is reading from the origin
// now, before it is verified: 206, the bytes so far and then the rest as
// the origin delivers them, a body cut short when the origin read breaks;
// 416 from any node that is not reading exactly that chunk from the origin
// (a relay never answers it); 503 with Retry-After beyond 4 live streams,
// or a second one for the same node. The reader keeps the bytes in memory
// and writes or serves them only once they match the chunk's digest from
// the coordinator: cut-through of the last chunk saves the fabric a
// chunk's transfer after the origin's last byte.
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
