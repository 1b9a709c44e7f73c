package agent

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/swarmtest"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestSwarmHubForgingHolder: issue 24's forging lease holder (made-up
// digests, bytes served to match them) in the swarm of a Hub revision. A
// revision has no whole-file digest, so the forgery shows only when a
// file's last chunk lands and the file fails its own digest: the fetch
// ends, and its Gone names the digests it used; the coordinator refutes the
// forger (digests withdrawn, lease revoked), and the Prolog's next ensure
// reads the revision from the Hub, one copy, every file right.
//
// Seen failing as it should before: the bad file ended the fetch naming
// nobody, the forger kept the lease and its digests, and every ensure of
// the fabric read its bytes again and failed the same way.
func TestSwarmHubForgingHolder(t *testing.T) {
	x := newHubFabric(t, twelveFiles(), 241, 242)
	want := x.reference()
	sum := catalog.RevisionDigest(catalog.HubRevision(x.hb))
	liar := &swarmtest.Member{Node: "n241", Fabric: "ib-a", Addr: "127.0.0.241:0",
		Coord:  &api.Client{BaseURL: x.e.url, Auth: munge.Authenticator{Codec: x.e.realm.Start("127.0.0.241")}},
		Source: x.src, SHA256: sum, Size: x.size, ChunkSize: revChunk,
		MadeUpSums: true, Serve: swarmtest.ServeForged, FakeOriginBytes: revChunk}
	startLiar(t, liar)
	if _, leases, _ := liar.Plans(); leases == 0 {
		t.Fatal("the forger did not take the lease first")
	}
	a := x.agent(242, 0, "")
	base := x.hub.Served()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := x.ensure(ctx, a)
	if liar.Answers()[http.StatusPartialContent] == 0 {
		t.Fatalf("nobody read the forger's chunks (ensure: %v): the case did not happen", err)
	}
	t.Logf("the first ensure, with the forger holding the lease: %v", err)
	until(t, 10*time.Second, "the forger refuted", func() bool {
		st := swarmStatusOf(t, x.e.url, sum)
		return st != nil && slices.Contains(st.Refuted, liar.Node) && slices.Contains(st.LeaseRevoked, liar.Node)
	})
	if err != nil {
		if _, err := x.ensure(ctx, a); err != nil {
			t.Fatalf("the ensure after the forger was refuted: %v", err)
		}
	}
	x.check(a, want)
	served := x.hub.Served() - base
	t.Logf("the Hub served %d bytes for a %d-byte revision; the forger answered %v", served, x.size, liar.Answers())
	if served > x.size+2*revChunk {
		t.Errorf("the Hub served %d bytes, %.2f copies of the %d-byte revision; one", served, float64(served)/float64(x.size), x.size)
	}
	if st := swarmStatusOf(t, x.e.url, sum); st != nil {
		for _, b := range st.Bad {
			if b.Peer != liar.Node {
				t.Errorf("honest %s accused by %v", b.Peer, b.By)
			}
		}
	}
}
