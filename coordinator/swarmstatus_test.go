package coordinator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
)

// TestSwarmStatusAndMetrics: status shows each swarm with its model, lease
// holder, members, complete holders, bytes from the origin and from peers,
// and the peers reported bad or unreachable; /metrics counts the bytes per
// fabric from the increments of the members' reports (a member that
// restarts its count adds nothing twice), and the swarms and lease holders
// per fabric, with a fabric Slurm does not list under "other".
func TestSwarmStatusAndMetrics(t *testing.T) {
	ctx := context.Background()
	e := swarmEnv(t)
	addModel(t, e, api.Model{Name: "s", Source: "https://origin/s.gguf?sig=secret", SHA256: swarmSHA, Size: 4 * DefaultSwarmMinChunk})
	with := func(r api.SwarmReport, f func(*api.SwarmReport)) api.SwarmReport { f(&r); return r }
	ask(t, e, with(sreport("n1", 0), func(r *api.SwarmReport) { r.FromOrigin = 100 }))
	ask(t, e, with(sreport("n1", 0, 1), func(r *api.SwarmReport) { r.FromOrigin = 250 }))
	ask(t, e, sreport("n4"))
	ask(t, e, with(sreport("n2", 0), func(r *api.SwarmReport) { r.FromPeers = 300; r.Bad = []string{"n4"} }))
	ask(t, e, with(sreport("n3", 0, 1, 2, 3), func(r *api.SwarmReport) {
		r.Complete, r.Bad, r.Unreachable = true, []string{"n4"}, []string{"n1"}
	}))
	ask(t, e, with(sreport("m1"), func(r *api.SwarmReport) { r.FromOrigin = 50 }))
	// n1's agent restarted: its count starts again from 20, and only what
	// it adds from there is new.
	ask(t, e, with(sreport("n1", 0, 1), func(r *api.SwarmReport) { r.FromOrigin = 20 }))
	ask(t, e, with(sreport("n1", 0, 1), func(r *api.SwarmReport) { r.FromOrigin = 70 }))
	// A signed source, in a swarm of its own: redacted for anyone who may
	// not fetch it.
	ask(t, e, with(sreport("n2"), func(r *api.SwarmReport) { r.Source = "https://origin/s.gguf?sig=secret" }))

	st, err := e.anon.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Swarms) != 3 {
		t.Fatalf("status shows %d swarms, want 3: %+v", len(st.Swarms), st.Swarms)
	}
	a, signed, b := st.Swarms[0], st.Swarms[1], st.Swarms[2]
	if a.Fabric != "ib-a" || a.Model != "m" || a.Holder != "n1" || a.Members != 4 || a.Complete != 1 ||
		a.FromOrigin != 300 || a.FromPeers != 300 || a.Chunks != 4 || a.LeaseChanges != 1 {
		t.Errorf("ib-a's swarm = %+v", a)
	}
	if fmt.Sprint(a.Bad) != "[{n4 [n2 n3] true}]" || fmt.Sprint(a.Unreachable) != "[n1]" {
		t.Errorf("ib-a's bad %v and unreachable %v, want n4 dropped by n2 and n3, n1 unreachable", a.Bad, a.Unreachable)
	}
	if b.Fabric != "ib-b" || b.Holder != "m1" || b.Members != 1 || b.FromOrigin != 50 || b.Bad != nil {
		t.Errorf("ib-b's swarm = %+v", b)
	}
	if fmt.Sprint(st.SwarmBytes) != "[{ib-a 300 300} {ib-b 50 0}]" {
		t.Errorf("status's bytes per fabric = %v", st.SwarmBytes)
	}
	if strings.Contains(signed.Source, "secret") || signed.Model != "s" {
		t.Errorf("the signed source shows as %q (model %q) to an anonymous reader", signed.Source, signed.Model)
	}
	st, _ = e.admin.Status(ctx)
	if !strings.Contains(st.Swarms[1].Source, "sig=secret") {
		t.Errorf("an admin sees %q, want the source as it is", st.Swarms[1].Source)
	}

	compare := func(want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(e.srv.metrics.reg, strings.NewReader(want),
			"llmgw_coordinator_swarms", "llmgw_coordinator_swarm_lease_holders", "llmgw_coordinator_swarm_received_bytes_total"); err != nil {
			t.Error(err)
		}
	}
	const head = `
# HELP llmgw_coordinator_swarm_lease_holders Swarms whose origin lease a node holds, per fabric: the nodes reading the origin for their fabric now.
# TYPE llmgw_coordinator_swarm_lease_holders gauge
%s# HELP llmgw_coordinator_swarm_received_bytes_total Bytes swarm members reported receiving, per fabric and from where (origin or peers), since the coordinator started; from="origin" over the sum is the share the site's uplink carried.
# TYPE llmgw_coordinator_swarm_received_bytes_total counter
%s# HELP llmgw_coordinator_swarms Swarms (nodes of a fabric fetching one source through their peers) the coordinator keeps, per fabric.
# TYPE llmgw_coordinator_swarms gauge
%s`
	compare(fmt.Sprintf(head, `llmgw_coordinator_swarm_lease_holders{fabric="ib-a"} 2
llmgw_coordinator_swarm_lease_holders{fabric="ib-b"} 1
`, `llmgw_coordinator_swarm_received_bytes_total{fabric="ib-a",from="origin"} 300
llmgw_coordinator_swarm_received_bytes_total{fabric="ib-a",from="peers"} 300
llmgw_coordinator_swarm_received_bytes_total{fabric="ib-b",from="origin"} 50
llmgw_coordinator_swarm_received_bytes_total{fabric="ib-b",from="peers"} 0
`, `llmgw_coordinator_swarms{fabric="ib-a"} 2
llmgw_coordinator_swarms{fabric="ib-b"} 1
`))

	// The peers accused, counted per fabric (status names them).
	if err := testutil.GatherAndCompare(e.srv.metrics.reg, strings.NewReader(`
# HELP llmgw_coordinator_swarm_accused_peers Peers members of the swarms kept now reported, per fabric and why: bad (sent a chunk that did not match its digest) or unreachable (refused, stalled or did not answer, lately); summed over swarms, status names them.
# TYPE llmgw_coordinator_swarm_accused_peers gauge
llmgw_coordinator_swarm_accused_peers{fabric="ib-a",why="bad"} 1
llmgw_coordinator_swarm_accused_peers{fabric="ib-a",why="unreachable"} 1
llmgw_coordinator_swarm_accused_peers{fabric="ib-b",why="bad"} 0
llmgw_coordinator_swarm_accused_peers{fabric="ib-b",why="unreachable"} 0
# HELP llmgw_coordinator_swarm_frozen_chunks Chunks of the swarms kept now that two origin readers gave different digests for, none published until a second read agrees, per fabric.
# TYPE llmgw_coordinator_swarm_frozen_chunks gauge
llmgw_coordinator_swarm_frozen_chunks{fabric="ib-a"} 0
llmgw_coordinator_swarm_frozen_chunks{fabric="ib-b"} 0
`), "llmgw_coordinator_swarm_accused_peers", "llmgw_coordinator_swarm_frozen_chunks"); err != nil {
		t.Error(err)
	}

	// The swarms go idle and are dropped; the byte totals stay. Slurm's
	// list now has only ib-a's nodes: ib-b's bytes count under "other".
	e.clock.set(t0.Add(swarmIdle + time.Minute))
	for _, n := range []string{"n1", "n2", "n3", "n4", "m1"} {
		if _, err := e.agent.PostReport(ctx, report(n, map[bool]string{true: "ib-b", false: "ib-a"}[n == "m1"], 2)); err != nil {
			t.Fatal(err)
		}
	}
	addModel(t, e, api.Model{Name: "other", Source: "https://origin/other.gguf", SHA256: swarmSHA, Size: 4 * DefaultSwarmMinChunk})
	ask(t, e, with(sreport("n2"), func(r *api.SwarmReport) { r.Source = "https://origin/other.gguf" }))
	e.srv.view.setSlurmStates(map[string]string{"n1": "idle", "n2": "idle", "n3": "idle", "n4": "idle"})
	compare(fmt.Sprintf(head, `llmgw_coordinator_swarm_lease_holders{fabric="ib-a"} 1
`, `llmgw_coordinator_swarm_received_bytes_total{fabric="ib-a",from="origin"} 300
llmgw_coordinator_swarm_received_bytes_total{fabric="ib-a",from="peers"} 300
llmgw_coordinator_swarm_received_bytes_total{fabric="other",from="origin"} 50
llmgw_coordinator_swarm_received_bytes_total{fabric="other",from="peers"} 0
`, `llmgw_coordinator_swarms{fabric="ib-a"} 1
`))
	if problems, err := testutil.GatherAndLint(e.srv.metrics.reg); err != nil || len(problems) > 0 {
		t.Errorf("metrics lint: %v %+v", err, problems)
	}
}
