package agent

// A member without a plan (issue 24, item 5, the agent's part): the
// coordinator down or refusing must not keep a node from the origin for
// ever, nor send a fabric to it the moment the coordinator blinks.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// TestSwarmNoPlanReadsOriginAlone: a node whose coordinator is down from
// the start reads the origin itself once its grace (planGrace, 2 s here)
// has passed, not before, and verifies the file against its pin. On main
// it asked for a plan once a second until its caller gave up, and never
// read the origin.
func TestSwarmNoPlanReadsOriginAlone(t *testing.T) {
	e := newFabric(t, 8, faultChunk, 16<<20, 191)
	n := e.nodes["n191"]
	n.coordDown.Store(true)
	const grace = 2 * time.Second
	n.grace = grace
	start := time.Now()
	n.fetch(t)
	n.wait(t, grace+20*time.Second)
	e.report(t)
	reqs := e.o.requests()
	if len(reqs) == 0 {
		t.Fatal("the origin had no request")
	}
	if first := reqs[0].start.Sub(start); first < grace {
		t.Errorf("the node read the origin %v after it began, before its grace (%v): a coordinator restart would send every node of a fabric to the origin", first.Round(time.Millisecond), grace)
	} else {
		t.Logf("the node read the origin alone %v after it began", first.Round(time.Millisecond))
	}
	if got := e.o.sent.Load(); got != int64(len(e.data)) {
		t.Errorf("the origin served %d bytes of a %d-byte file", got, len(e.data))
	}
}

// TestSwarmCoordinatorAwayBriefly: the coordinator goes away for 3 s while
// the seed reads the origin and another member reads from it. The seed
// reads on under its lease; the other member waits (it reads what it can
// from the peers it knows) and does not read the origin; both finish, and
// the origin serves the file once.
func TestSwarmCoordinatorAwayBriefly(t *testing.T) {
	e := newFabric(t, 16, faultChunk, 1<<20, 193, 194)
	seed, other := e.nodes["n193"], e.nodes["n194"]
	e.seedFirst(t, seed, other)
	size := int64(len(e.data))
	until(t, 10*time.Second, "the seed read a quarter of the file", func() bool { return e.o.sent.Load() >= size/4 })
	seed.coordDown.Store(true)
	other.coordDown.Store(true)
	time.Sleep(3 * time.Second)
	seed.coordDown.Store(false)
	other.coordDown.Store(false)
	seed.wait(t, 30*time.Second)
	other.wait(t, 30*time.Second)
	e.report(t)
	for _, r := range e.o.requests() {
		if r.node != seed.name {
			t.Errorf("%s read the origin (bytes %d-%d) while the coordinator was briefly away and %s held the lease", r.node, r.from, r.to, seed.name)
		}
	}
	if got := e.o.sent.Load(); got != size {
		t.Errorf("the origin served %d bytes of a %d-byte file", got, size)
	}
}

// TestSwarmPlanRefusedReadsOriginAlone: the coordinator answers, and
// refuses (here the node is already in as many swarms as it may be; a full
// registry answers the same way): the node reads the origin alone after
// its grace, where on main it asked once a second until its deadline.
func TestSwarmPlanRefusedReadsOriginAlone(t *testing.T) {
	e := newFabric(t, 8, faultChunk, 16<<20, 192)
	n := e.nodes["n192"]
	for k := 0; ; k++ {
		_, sum := testData(t, 64)
		_, err := n.client.Swarm(context.Background(), api.SwarmReport{Node: n.name, Source: fmt.Sprintf("http://elsewhere/%d.bin", k),
			SHA256: sum, Size: 1 << 20, ChunkSize: faultChunk})
		if err != nil {
			t.Logf("the coordinator refuses a swarm report after %d: %v", k, err)
			break
		}
		if k > 100 {
			t.Fatal("the coordinator took 100 swarm reports for other files from one node")
		}
	}
	const grace = 2 * time.Second
	n.grace = grace
	n.fetch(t)
	n.wait(t, grace+20*time.Second)
	e.report(t)
	if got := e.o.sent.Load(); got != int64(len(e.data)) {
		t.Errorf("the origin served %d bytes of a %d-byte file", got, len(e.data))
	}
}
