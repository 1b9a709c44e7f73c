package coordinator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
)

// applyPlan is what Slurm makes of a plan: each call's sets on its nodes.
func applyPlan(t testing.TB, nodes []slurm.Node, plan slurm.FeaturePlan) []slurm.Node {
	t.Helper()
	out := slices.Clone(nodes)
	at := map[string]int{}
	for i, n := range out {
		at[n.Name] = i
	}
	for _, u := range plan.Updates() {
		for _, name := range u.Nodes {
			i, ok := at[name]
			if !ok {
				t.Fatalf("%s names %s, which the plan was not made for", u, name)
			}
			if u.Record {
				out[i].Available = u.Available
			}
			out[i].Active = u.Active
		}
	}
	return out
}

// rackNodes is n nodes in racks of size, each rack a config record (its
// own site feature), nothing of llmgw's yet.
func rackNodes(n, size int) []slurm.Node {
	nodes := make([]slurm.Node, n)
	for i := range nodes {
		rack := fmt.Sprintf("r%03d", i/size)
		nodes[i] = slurm.Node{Name: fmt.Sprintf("g%05d", i), Available: []string{rack}, Active: []string{rack}, State: "idle"}
	}
	return nodes
}

func owned(fs []string) []string {
	return slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return !strings.HasPrefix(f, placement.FeaturePrefix) })
}

// TestFeaturesOfferWhatRecordsHold: a config record offers (AvailableFeatures)
// the models its nodes hold, not the catalog: a rack whose nodes hold
// nothing offers nothing of llmgw's, and a node listing carries what the
// records hold. Before, every record offered every catalog model.
func TestFeaturesOfferWhatRecordsHold(t *testing.T) {
	f := &features{offers: newOffers(offerHold), listingMax: maxNodeListing}
	now := time.Unix(1e9, 0)
	f.offers.begin(now)
	models := []string{"a", "b", "c", "d", "e", "f"}
	nodes := rackNodes(12, 4) // racks r000, r001, r002
	desired := map[string][]string{
		"g00000": {"llmgw.a"}, "g00001": {"llmgw.a", "llmgw.b"},
		"g00005": {"llmgw.c"},
	}
	plan, withheld, bytes := f.plan(nodes, desired, models, now)
	if len(withheld) != 0 {
		t.Errorf("withheld %q", withheld)
	}
	after := applyPlan(t, nodes, plan)
	want := map[string]string{"r000": "llmgw.a,llmgw.b", "r001": "llmgw.c", "r002": ""}
	for _, n := range after {
		if got := strings.Join(owned(n.Available), ","); got != want[n.Active[0]] {
			t.Errorf("%s (rack %s) offers %q, want %q", n.Name, n.Active[0], got, want[n.Active[0]])
		}
	}
	if wantBytes := int64(4*len("llmgw.a,llmgw.b,") + 4*len("llmgw.c,")); bytes != wantBytes {
		t.Errorf("listing bytes %d, want %d", bytes, wantBytes)
	}
	if len(plan.Records) != 2 {
		t.Errorf("%d record writes, want 2 (the racks whose nodes hold a model): %q", len(plan.Records), plan.Commands())
	}
}

// TestFeaturesOfferHold: a model held and dropped does not rewrite its
// record every interval: the record keeps offering it for offerHold after
// the last of its nodes held it, so a model dropped and fetched again
// within the hour costs no record write at all; past the hold one write
// drops it. A coordinator that starts counts what the records offer then
// as held, so a restart drops nothing it cannot know to be old.
func TestFeaturesOfferHold(t *testing.T) {
	f := &features{offers: newOffers(offerHold), listingMax: maxNodeListing}
	t0 := time.Unix(1e9, 0)
	models := []string{"a", "b"}
	nodes := rackNodes(4, 4)
	writes := 0
	step := func(now time.Time, desired map[string][]string) {
		t.Helper()
		f.offers.begin(now)
		plan, _, _ := f.plan(nodes, desired, models, now)
		writes += len(plan.Records)
		nodes = applyPlan(t, nodes, plan)
		f.offers.note(now, desired)
	}
	held := map[string][]string{"g00000": {"llmgw.a"}}
	step(t0, held)
	if writes != 1 || fmt.Sprint(owned(nodes[3].Available)) != "[llmgw.a]" {
		t.Fatalf("first run: %d record writes, g00003 offers %q", writes, nodes[3].Available)
	}
	// Dropped and held again, every other interval, for 50 minutes.
	for i := 1; i <= 100; i++ {
		d := held
		if i%2 == 1 {
			d = nil
		}
		step(t0.Add(time.Duration(i)*30*time.Second), d)
	}
	if writes != 1 {
		t.Errorf("a model dropped and held again every other interval made %d record writes in 50 minutes; want none after the first", writes-1)
	}
	// Dropped for good: offered for the hold, then one write takes it away.
	last := t0.Add(100 * 30 * time.Second)
	for i := 1; i <= 130; i++ {
		step(last.Add(time.Duration(i)*30*time.Second), nil)
		if now := time.Duration(i) * 30 * time.Second; now <= offerHold && len(owned(nodes[0].Available)) == 0 {
			t.Fatalf("the record stopped offering llmgw.a %s after the last holder dropped it; the hold is %s", now, offerHold)
		}
	}
	if writes != 2 || len(owned(nodes[0].Available)) != 0 {
		t.Errorf("past the hold: %d record writes in all (want 2), the record offers %q (want nothing of llmgw's)", writes, nodes[0].Available)
	}

	// A restarted coordinator: what the record offers counts as held from
	// its start.
	f = &features{offers: newOffers(offerHold), listingMax: maxNodeListing}
	nodes[0].Available = []string{"r000", "llmgw.b"}
	for i := range nodes {
		nodes[i].Available = nodes[0].Available
	}
	restart := last.Add(5 * time.Hour)
	writes = 0
	step(restart, nil)
	step(restart.Add(30*time.Minute), nil)
	if writes != 0 {
		t.Errorf("a restarted coordinator rewrote the record within the hold: %d writes", writes)
	}
	step(restart.Add(offerHold+time.Minute), nil)
	if writes != 1 || len(owned(nodes[0].Available)) != 0 {
		t.Errorf("a restarted coordinator past the hold: %d writes, offers %q", writes, nodes[0].Available)
	}

	// A model gone from the catalog leaves at once.
	f = &features{offers: newOffers(offerHold), listingMax: maxNodeListing}
	step(restart, map[string][]string{"g00000": {"llmgw.a", "llmgw.b"}})
	models = []string{"a"}
	step(restart.Add(time.Minute), map[string][]string{"g00000": {"llmgw.a"}})
	if fmt.Sprint(owned(nodes[1].Available)) != "[llmgw.a]" {
		t.Errorf("after b left the catalog the record offers %q", nodes[1].Available)
	}
}

// TestWithheldModels: every model is offered as long as what llmgw adds to
// a node listing fits the bound (200 models of 64-character names on every
// one of 10,000 nodes is 142 MB, within the default 256 MB); past a
// smaller bound the least-held models are withheld, the same ones every
// run, and what is left fits.
func TestWithheldModels(t *testing.T) {
	models := make([]string, 200)
	for i := range models {
		// 64 characters, the longest name the catalog takes.
		models[i] = fmt.Sprintf("m%03d-%s", i, strings.Repeat("x", 59))
	}
	nodes := rackNodes(10000, 40)
	// m000 is held by the most nodes, m199 by one; every rack holds all.
	desired := map[string][]string{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		for range 1 + (199-i)*20 {
			n := nodes[rng.IntN(len(nodes))].Name
			desired[n] = append(desired[n], placement.FeaturePrefix+models[i])
		}
	}
	all := map[string][]string{}
	for _, n := range nodes {
		for _, m := range models {
			all[n.Name] = append(all[n.Name], placement.FeaturePrefix+m)
		}
	}
	withheld, bytes := withheldModels(nodes, desired, all, maxNodeListing)
	if len(withheld) != 0 || bytes != 10000*int64(200*71) {
		t.Fatalf("every model on every node: %d withheld, %d bytes; want none, %d", len(withheld), bytes, 10000*200*71)
	}
	const budget = 16 << 20
	withheld, bytes = withheldModels(nodes, desired, all, budget)
	if len(withheld) == 0 || bytes > budget {
		t.Fatalf("a 16 MB bound: %d withheld, %d bytes", len(withheld), bytes)
	}
	if !slices.Contains(withheld, models[199]) || slices.Contains(withheld, models[0]) {
		t.Errorf("withheld %q…: want the least-held first", withheld[:3])
	}
	again, _ := withheldModels(nodes, desired, all, budget)
	if !slices.Equal(again, withheld) {
		t.Errorf("a second run withholds other models")
	}
	left := listing(nodes, withhold(desired, withheld), withhold(all, withheld))
	var sum int64
	for f, c := range left {
		if slices.Contains(withheld, strings.TrimPrefix(f, placement.FeaturePrefix)) {
			t.Errorf("withhold kept %s", f)
		}
		sum += c
	}
	if sum != bytes {
		t.Errorf("the listing left is %d bytes, withheldModels said %d", sum, bytes)
	}
}

// BenchmarkFeaturePlan is the reconciler's plan for 1,000 nodes in 8
// fabrics (a config record each) holding random mixes of 0-6 of 50
// models, from a fresh cluster: the models withheld (issue 26: 46 with
// feature_sets_max), the AvailableFeatures writes (one per record, whole),
// the presence calls, and the distinct sets, each of which split a record
// when presence was AvailableFeatures. scripts/bench/scale.sh prints it.
func BenchmarkFeaturePlan(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 17))
	nodes := make([]slurm.Node, 1000)
	desired := map[string][]string{}
	models := make([]string, 50)
	for m := range models {
		models[m] = fmt.Sprintf("m%02d", m)
	}
	for i := range nodes {
		fabric := fmt.Sprintf("ib-%d", i%8)
		nodes[i] = slurm.Node{Name: fmt.Sprintf("gpu%04d", i), Available: []string{fabric}, Active: []string{fabric}}
		for range rng.IntN(7) {
			desired[nodes[i].Name] = append(desired[nodes[i].Name], placement.FeaturePrefix+models[rng.IntN(len(models))])
		}
	}
	f := &features{offers: newOffers(offerHold), listingMax: maxNodeListing}
	now := time.Unix(1e9, 0)
	f.offers.begin(now)
	var plan slurm.FeaturePlan
	var withheld []string
	for b.Loop() {
		plan, withheld, _ = f.plan(nodes, desired, models, now)
	}
	sets := map[string]bool{}
	for _, n := range nodes {
		fs := slices.Clone(desired[n.Name])
		slices.Sort(fs)
		sets[n.Available[0]+" "+strings.Join(slices.Compact(fs), ",")] = true
	}
	b.ReportMetric(float64(len(withheld)), "withheld-models")
	b.ReportMetric(float64(len(plan.Records)), "record-writes")
	b.ReportMetric(float64(len(plan.Presence)), "presence-calls")
	b.ReportMetric(float64(len(sets)), "distinct-sets")
}
