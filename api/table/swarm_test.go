package table

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// TestWriteStatusSwarmsAndSeeds: the status table shows each swarm with
// its lease holder, members, bytes from the origin and from peers and the
// peers members could not use, a swarm of no catalog model by its source,
// and the seed requests still asking with the nodes not yet handed the ask;
// a control character from the network is escaped.
func TestWriteStatusSwarmsAndSeeds(t *testing.T) {
	until := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	st := &api.Status{
		Models:  []api.ModelStatus{{Model: api.Model{Name: "big", Source: "https://o/big.gguf"}}},
		Fabrics: []api.FabricNodes{{Fabric: "ib-a"}},
		Swarms: []api.SwarmStatus{
			{Fabric: "ib-a", Model: "big", Source: "https://o/big.gguf", Holder: "n1", Members: 4, Complete: 1,
				FromOrigin: 140e9, FromPeers: 280e9, Unreachable: []string{"n4"},
				Bad: []api.SwarmBadPeer{{Peer: "n3", By: []string{"n2", "n5"}, Dropped: true}, {Peer: "n6", By: []string{"n2"}}}},
			{Fabric: "ib-b", Source: "https://o/x\x1b[2J.gguf", Members: 1},
			{Fabric: "ib-c", Model: "big", Source: "https://o/big.gguf", Holder: "m1", Members: 3, Refuted: []string{"m9"}, Frozen: 2, LeaseRevoked: []string{"m8", "m9"}},
		},
		SwarmBytes: []api.FabricSwarmBytes{{Fabric: "ib-a", FromOrigin: 140e9, FromPeers: 420e9}, {Fabric: "ib-b"}},
		Seeds: []api.SeedStatus{{ID: "abc", Model: "big", Fabric: "ib-a", Deadline: until,
			Nodes: []api.SeedNode{{Node: "n7", Handed: until.Add(-time.Hour)}, {Node: "n8"}}}},
	}
	var b bytes.Buffer
	if err := WriteStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := map[string]bool{}
	for l := range strings.SplitSeq(out, "\n") {
		lines[squeeze(l)] = true
	}
	for _, want := range []string{
		"FABRIC MODEL LEASE HOLDER MEMBERS COMPLETE FROM ORIGIN FROM PEERS BAD/UNREACHABLE",
		"ib-a big n1 4 1 140 GB 280 GB bad n3 (by n2,n5; dropped), bad n6 (by n2), unreachable n4",
		`ib-b https://o/x\x1b[2J.gguf - 1 0 0 B 0 B -`,
		"ib-c big m1 3 0 0 B 0 B digests refuted m9, 2 chunks frozen, lease revoked m8,m9",
		"FABRIC FROM ORIGIN FROM PEERS FROM PEERS %",
		"ib-a 140 GB 420 GB 75%",
		"ib-b 0 B 0 B -",
		"MODEL FABRIC ASKED NOT YET HANDED UNTIL REQUEST",
		"big ib-a n7,n8 n8 2026-12-06T20:00:00Z abc",
	} {
		if !lines[want] {
			t.Errorf("status lacks the line %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("a control character reached the terminal")
	}

	// Nothing under way: no section at all.
	b.Reset()
	st.Swarms, st.Seeds, st.SwarmBytes = nil, nil, nil
	if err := WriteStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "SWARMS") || strings.Contains(b.String(), "SEEDING") || strings.Contains(b.String(), "FROM PEERS") {
		t.Errorf("empty sections printed:\n%s", b.String())
	}
}

// TestWriteSeed: the seed table says each node's part, when it was asked
// and when it held the model, and its fetch.
func TestWriteSeed(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 19, 0, 0, 0, time.UTC)
	st := api.SeedStatus{ID: "abc", Model: "big", Fabric: "ib-a", Copies: 3, Created: t0, Deadline: t0.Add(time.Hour), Note: "a note",
		Nodes: []api.SeedNode{
			{Node: "n1", State: api.SeedHeld},
			{Node: "n2", State: api.SeedDone, Handed: t0.Add(2 * time.Second), Done: t0.Add(90 * time.Second)},
			{Node: "n3", State: api.SeedAsked, Handed: t0.Add(time.Second), Fetch: &api.FetchStatus{Node: "n3", Done: 41, Total: 100, Percent: 41, Rate: 120e6, ETA: 72}},
		}}
	var b bytes.Buffer
	if err := WriteSeed(&b, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"seed abc: big in ib-a, 3 copies (asking until 2026-12-06T20:00:00Z)",
		"NOTE: a note",
		"n1 held - - -",
		"n2 done +2s +1m30s -",
		"n3 asked +1s - 41% 120 MB/s ETA 1m12s",
	} {
		if !strings.Contains(squeeze(b.String()), want) {
			t.Errorf("seed table lacks %q:\n%s", want, b.String())
		}
	}
	if got := SeedProgress(st.Nodes[2]); got != "n3: fetching 41% 120 MB/s ETA 1m12s" {
		t.Errorf("progress line %q", got)
	}
}
