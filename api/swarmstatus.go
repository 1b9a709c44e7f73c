package api

// SwarmStatus is one swarm as GET /v1/status shows it: the nodes of one
// fabric fetching one source at one pinned digest (docs/design.md "The
// swarm"). It is the coordinator's soft state, as of Status.Generated.
type SwarmStatus struct {
	Fabric string `json:"fabric"`
	// Model is the catalog model whose file Source is, "" when none is.
	Model  string `json:"model,omitempty"`
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size_bytes"`
	Chunks int    `json:"chunks"`
	// Holder is the node holding the fabric's origin lease, "" when none
	// does (every member complete, or between two holders).
	Holder string `json:"holder,omitempty"`
	// LeaseChanges counts the times the lease was taken.
	LeaseChanges int64 `json:"lease_changes"`
	// Members are the nodes fetching or serving it now; Complete those of
	// them (and of the members that finished and left, still offered as
	// peers) that hold the whole verified file.
	Members  int `json:"members"`
	Complete int `json:"complete"`
	// FromOrigin and FromPeers are the bytes the swarm's members received
	// from the origin and from peers of the fabric, as they reported them.
	FromOrigin int64 `json:"from_origin_bytes"`
	FromPeers  int64 `json:"from_peers_bytes"`
	// Bad are the peers members reported for a bad chunk, each with its
	// accusers; Unreachable the peers a member could not connect to lately.
	Bad         []SwarmBadPeer `json:"bad,omitempty"`
	Unreachable []string       `json:"unreachable,omitempty"`
	// Idle is how long since a member last reported, in seconds.
	Idle float64 `json:"idle_seconds"`
	// Recorded says the swarm's chunk digests are the list the catalog
	// records with the pin (two members verified the whole file with it):
	// no member's digest changes them.
	Recorded bool `json:"recorded,omitempty"`
	// Frozen counts the chunks two origin readers gave different digests
	// for: none is published until a second read agrees with one.
	Frozen int `json:"frozen_chunks,omitempty"`
	// Refuted are the members whose digests lost such a dispute, or
	// contradict the recorded list: liars, or readers of other bytes.
	Refuted []string `json:"refuted,omitempty"`
	// LeaseRevoked are the members that lost the origin lease for what
	// they did rather than for silence: no evidence of reading the origin
	// (they said they read, and published nothing), chunks two members
	// found bad, or digests that contradict the recorded list or made a
	// member's file fail the pin. They are passed over for the lease.
	LeaseRevoked []string `json:"lease_revoked,omitempty"`
}

// FabricSwarmBytes is what one fabric's swarm members received, from the
// origin and from peers of the fabric, as they reported it.
type FabricSwarmBytes struct {
	Fabric     string `json:"fabric"`
	FromOrigin int64  `json:"from_origin_bytes"`
	FromPeers  int64  `json:"from_peers_bytes"`
}

// SwarmBadPeer is a peer reported for a bad chunk. Dropped says it is left
// out of every member's plan (enough distinct accusers); otherwise only its
// accusers stop reading from it.
type SwarmBadPeer struct {
	Peer    string   `json:"peer"`
	By      []string `json:"by"`
	Dropped bool     `json:"dropped"`
}
