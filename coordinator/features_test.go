package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/table"
	"github.com/llmgw/llmgw/slurm"
)

func TestDesiredFeatures(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ReportInterval: 10 * time.Second}, testTokens)
	for _, m := range []api.Model{
		{Name: "llama", Source: "/models/llama"},
		{Name: "qwen", Source: "/lustre/qwen"},
		{Name: "remote", Source: "hf:org/repo/model.gguf"},
	} {
		if _, err := e.admin.PutModel(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	llama := api.Weight{Path: "/models/llama", Complete: true, Size: 10}
	qwen := api.Weight{Path: "/lustre/qwen", Shared: true, Complete: true, Size: 10}
	post := func(r *api.Report) {
		t.Helper()
		if _, err := e.agent.PostReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	post(report("old", "ib-b", 1, llama)) // stale by the time we ask
	e.clock.set(t0.Add(time.Minute))
	post(report("n1", "ib-a", 1, llama))
	post(report("n2", "ib-a", 1, qwen, llama))
	post(report("n3", "ib-b", 1, api.Weight{Path: "/models/llama", Size: 3, Problem: "no weight file"}))
	post(report("n4", "ib-b", 1, api.Weight{Path: "/models/other", Complete: true}))
	post(report("n10", "ib-b", 1, qwen))
	now := t0.Add(time.Minute + 5*time.Second)

	want := map[string][]string{
		"n1":  {"llmgw.llama"},
		"n2":  {"llmgw.llama", "llmgw.qwen"},
		"n10": {"llmgw.qwen"},
	}
	if got, _ := e.srv.desiredFeatures(now, t0); !reflect.DeepEqual(got, want) {
		t.Errorf("desiredFeatures =\n  %v\nwant\n  %v", got, want)
	}
	// A reconciler that started after old's last report gives it three
	// intervals from its start before calling it stale.
	want["old"] = []string{"llmgw.llama"}
	if got, _ := e.srv.desiredFeatures(now, t0.Add(time.Minute)); !reflect.DeepEqual(got, want) {
		t.Errorf("desiredFeatures with a late start =\n  %v\nwant\n  %v", got, want)
	}
	// Removing a model from the catalog removes its feature.
	if err := e.admin.DeleteModel(ctx, "qwen"); err != nil {
		t.Fatal(err)
	}
	got, models := e.srv.desiredFeatures(now, t0)
	if want := map[string][]string{"n1": {"llmgw.llama"}, "n2": {"llmgw.llama"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after deleting qwen: %v, want %v", got, want)
	}
	// The catalog, whose every model is offered (AvailableFeatures).
	if !reflect.DeepEqual(models, []string{"llama", "remote"}) {
		t.Errorf("after deleting qwen the catalog is %v, want [llama remote]", models)
	}
}

func TestFeatureFile(t *testing.T) {
	nodes := []slurm.Node{
		{Name: "n10", Active: []string{"ib-b"}, Partitions: []string{"debug"}},
		{Name: "n2", Available: []string{"ib-a", "llmgw.qwen", "llmgw.llama"}, Active: []string{"ib-a", "llmgw.qwen", "llmgw.llama"}, Partitions: []string{"debug", "gpu"}},
		{Name: "n1", Available: []string{"llmgw.llama", "llmgw.idle", "llmgw.a b"}, Active: []string{"llmgw.llama", "llmgw.a b", "llmgw.x|y", "x,y", "a b", ""}},
		// Neither the admin's nor llmgw's: nothing, written as -.
		{Name: "n11", Active: []string{"a\tb"}, Partitions: []string{"gpu"}},
	}
	synced := time.Unix(1796288377, 900e6) // the header keeps whole seconds, rounded down
	want := FeatureFileHeader + " synced=1796288377 interval=30 features=all lines=<digest>\n" +
		// The classes (slurm.WriteFeatureClasses), in the nodes' order.
		"#c 1 - -\n" +
		"#c 1 debug,gpu ib-a\n" +
		"#c 1 debug ib-b\n" +
		"#c 1 gpu -\n" +
		"#h llmgw.llama 1:1,2:1\n" +
		"#h llmgw.qwen 2:1\n" +
		"n1 - llmgw.llama\n" +
		"n2 debug,gpu ib-a,llmgw.llama,llmgw.qwen\n" +
		"n10 debug ib-b\n" +
		"n11 gpu -\n"
	got := string(FeatureFile(nodes, synced, 30*time.Second, false))
	if withoutDigest(got) != want {
		t.Errorf("FeatureFile =\n%s\nwant\n%s", got, want)
	}
	// A sub-second interval (tests use them) stays exact, for
	// job_submit.lua's tonumber.
	if got, want := withoutDigest(string(FeatureFile(nil, synced, 1500*time.Millisecond, false))), FeatureFileHeader+" synced=1796288377 interval=1.5 features=all lines=<digest>\n"; got != want {
		t.Errorf("FeatureFile(nil) = %q, want %q", got, want)
	}

	// The digest follows the lines after the header and nothing else: job_submit.lua
	// keeps its parsed index while it stays the same.
	digest := func(b []byte) string { return linesDigest.FindStringSubmatch(string(b))[1] }
	same := digest(FeatureFile(nodes, synced.Add(time.Hour), time.Minute, false))
	changed := slices.Clone(nodes)
	changed[0].Active = []string{"ib-a"}
	other := digest(FeatureFile(changed, synced, 30*time.Second, false))
	if d := digest([]byte(got)); d != same || d == other {
		t.Errorf("lines= digest %s; with a new sync time and interval %s (want the same), with a node's features changed %s (want another)", d, same, other)
	}

	// Under ignore_prefer_validation the header says so after the digest;
	// the lines and their digest are the same.
	fb := string(FeatureFile(nodes, synced, 30*time.Second, true))
	head, rest, _ := strings.Cut(fb, "\n")
	if !strings.HasSuffix(head, " lines="+digest([]byte(got))+" prefer=fallback") || rest+"\n" != strings.SplitN(got, "\n", 2)[1]+"\n" {
		t.Errorf("FeatureFile(fallback) =\n%s\nwant the same lines, the header ending in prefer=fallback", fb)
	}
}

// linesDigest is the header's digest of the node lines.
var linesDigest = regexp.MustCompile(` lines=([0-9a-f]{16})[ \n]`)

// withoutDigest writes the header's digest as <digest>, for comparing the
// rest of a feature file.
func withoutDigest(file string) string {
	return linesDigest.ReplaceAllString(file, " lines=<digest>\n")
}

// TestFeatureFileRewrittenEverySync: the sync time in the header is what
// job_submit.lua trusts, so a run that changes nothing still rewrites the
// file with its own time.
func TestFeatureFileRewrittenEverySync(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "features")
	f := &features{file: file, interval: 30 * time.Second}
	nodes := []slurm.Node{{Name: "n1", Active: []string{"llmgw.m1"}, Partitions: []string{"debug"}}}
	for _, at := range []int64{1000, 1031} {
		if err := f.publish(nodes, time.Unix(at, 0), "debug", false); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(file)
		want := fmt.Sprintf("%s synced=%d interval=30 features=all lines=<digest>\n#c 1 debug -\n#h llmgw.m1 1:1\nn1 debug llmgw.m1\n", FeatureFileHeader, at)
		if err != nil || withoutDigest(string(got)) != want {
			t.Errorf("after the run at %d: %q, %v; want %q", at, got, err, want)
		}
	}
}

// TestFeaturesWithoutSlurm runs the reconciler where sinfo cannot be run: a
// real failure, the one a coordinator on a host without Slurm's clients
// meets. It must stay ready, say why in status and metrics, and retry.
func TestFeaturesWithoutSlurm(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "features")
	e := newEnv(t, Config{Features: true, Sinfo: filepath.Join(dir, "no-sinfo"), Scontrol: filepath.Join(dir, "no-scontrol"),
		FeatureFile: file, FeatureInterval: time.Minute}, testTokens)

	res, err := e.admin.SyncFeatures(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || !strings.Contains(res.Error, "reading Slurm's nodes") || !strings.Contains(res.Error, "no-sinfo") {
		t.Errorf("dry run answer: %+v", res)
	}
	// A dry run is not the reconciler's state.
	if st, _ := e.anon.Status(ctx); st.Features == nil || st.Features.Last != nil {
		t.Errorf("status after a dry run: %+v", st.Features)
	}
	if got := testutil.ToFloat64(e.srv.features.m.errors.WithLabelValues("read")); got != 0 {
		t.Errorf("a dry run counted an error: %v", got)
	}

	// The loop: fails at once, then retries a second later.
	e.srv.features.start(e.srv.stop)
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(e.srv.features.m.errors.WithLabelValues("read")) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the reconciler did not retry within 10 s of failing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get(e.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d while Slurm is unreachable; the coordinator's own work goes on", resp.StatusCode)
	}
	st, err := e.anon.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := st.Features
	if f == nil || f.Last == nil || !strings.Contains(f.Last.Error, "no-sinfo") || f.Retry.IsZero() || !f.LastOK.IsZero() {
		t.Fatalf("status.features = %+v", f)
	}
	var out strings.Builder
	if err := table.WriteStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SLURM FEATURES: FAILING (never worked; retry in") {
		t.Errorf("status table:\n%s", out.String())
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("feature file written without a read of Slurm: %v", err)
	}
	problems, err := testutil.GatherAndLint(e.srv.metrics.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	if got := testutil.ToFloat64(e.srv.features.m.calls); got != 0 {
		t.Errorf("calls = %v with no sinfo", got)
	}
}

func TestFeaturesEndpoint(t *testing.T) {
	ctx := context.Background()
	off := newEnv(t, Config{}, testTokens)
	if _, err := off.admin.SyncFeatures(ctx, true); err == nil || !strings.Contains(err.Error(), "--features") {
		t.Errorf("features off: %v", err)
	}
	if st, _ := off.anon.Status(ctx); st.Features != nil {
		t.Errorf("status shows features while off: %+v", st.Features)
	}
	on := newEnv(t, Config{Features: true, Sinfo: "/nonexistent/sinfo", FeatureFile: filepath.Join(t.TempDir(), "f")}, testTokens)
	if _, err := on.nodeClient(t, "n1").SyncFeatures(ctx, true); err == nil {
		t.Error("a node's token reconciled features")
	} else if code, _ := apiCode(err); code != http.StatusUnauthorized || err.Error() != errDenied.Error()+" (401 Unauthorized)" {
		t.Errorf("a node's token: %v, want the one refusal", err)
	}
	if _, err := on.anon.SyncFeatures(ctx, false); err == nil {
		t.Error("no token reconciled features")
	}
	req, _ := http.NewRequest(http.MethodPost, on.url+"/v1/features?dry_run=maybe", nil)
	req.Header.Set("Authorization", "Bearer "+testTokens.Admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("dry_run=maybe: %d", resp.StatusCode)
	}
}

// TestFeaturesPokedOnChange: a report that changes what a node holds
// complete asks the reconciler for a run; one that changes nothing it
// cares for does not, or a big cluster's steady reports would keep it busy.
func TestFeaturesPokedOnChange(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{Features: true, Sinfo: "/nonexistent/sinfo", ReportInterval: 10 * time.Second,
		FeatureFile: filepath.Join(t.TempDir(), "f")}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "llama", Source: "/models/llama"}); err != nil {
		t.Fatal(err)
	}
	poked := func() bool {
		select {
		case <-e.srv.features.kick:
			return true
		default:
			return false
		}
	}
	poked() // the catalog change
	llama := api.Weight{Path: "/models/llama", Complete: true, Size: 1}
	seq := int64(0)
	post := func(ws ...api.Weight) bool {
		t.Helper()
		seq++
		if _, err := e.agent.PostReport(ctx, report("n1", "ib-a", seq, ws...)); err != nil {
			t.Fatal(err)
		}
		return poked()
	}
	steps := []struct {
		what string
		ws   []api.Weight
		want bool
	}{
		{"a new node", []api.Weight{llama}, true},
		{"the same report", []api.Weight{llama}, false},
		{"a bigger file, still complete", []api.Weight{{Path: "/models/llama", Complete: true, Size: 2}}, false},
		{"an unrelated file", []api.Weight{{Path: "/models/llama", Complete: true, Size: 2}, {Path: "/x/y.gguf", Complete: true}}, false},
		{"the copy broken", []api.Weight{{Path: "/models/llama", Size: 2, Problem: "truncated"}}, true},
		{"nothing at all", nil, false},
		{"whole again", []api.Weight{llama}, true},
	}
	for _, st := range steps {
		if got := post(st.ws...); got != st.want {
			t.Errorf("%s: poked = %v, want %v", st.what, got, st.want)
		}
	}
	// Heard from again after being stale: its features come back.
	e.clock.set(t0.Add(time.Minute))
	if !post(llama) {
		t.Error("a node back from stale did not poke the reconciler")
	}
}

// TestFeaturesUnderNodeFeaturesPlugin: where slurmctld runs a NodeFeatures
// plugin an ActiveFeatures update is rewritten by the plugin (helpers keeps
// every active feature it does not manage), so the reconciler writes
// nothing, says why, and still publishes what Slurm has. Scripts stand in
// for Slurm; what the plugin does was read in Slurm's source
// (docs/slurm/behaviour.md §11).
func TestFeaturesUnderNodeFeaturesPlugin(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	calls := filepath.Join(dir, "scontrol-calls")
	fixture, _ := filepath.Abs(filepath.Join("..", "slurm", "testdata", "22.05", "sinfo-json-features.json"))
	conf, _ := filepath.Abs(filepath.Join("..", "slurm", "testdata", "22.05", "scontrol-show-config.txt"))
	for name, body := range map[string]string{
		"sinfo": `case "$*" in *--json*) exec cat '` + fixture + `';; *%P*) echo 'debug*';; esac`,
		"scontrol": `echo "$*" >>'` + calls + `'
case "$*" in "show config") sed 's|^NodeFeaturesPlugins .*|NodeFeaturesPlugins     = node_features/helpers|' '` + conf + `';; esac`,
		"squeue": `exit 0`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "features")
	e := newEnv(t, Config{Features: true, Sinfo: filepath.Join(dir, "sinfo"), Scontrol: filepath.Join(dir, "scontrol"),
		FeatureFile: file, FeatureInterval: time.Minute}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "llama", Source: "/models/llama"}); err != nil {
		t.Fatal(err)
	}
	e.clock.set(t0)
	if _, err := e.agent.PostReport(ctx, report("n1", "ib-a", 1, api.Weight{Path: "/models/llama", Complete: true, Size: 1})); err != nil {
		t.Fatal(err)
	}
	res, err := e.admin.SyncFeatures(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Error, "NodeFeaturesPlugins=node_features/helpers") || res.Calls != 0 || len(res.Commands) != 0 {
		t.Errorf("sync under a NodeFeatures plugin: %+v; want no call and the plugin named", res)
	}
	got, _ := os.ReadFile(calls)
	if strings.Contains(string(got), "update") {
		t.Errorf("scontrol was asked to update under a NodeFeatures plugin:\n%s", got)
	}
	if data, err := os.ReadFile(file); err != nil || !strings.Contains(string(data), "\nn1 ") {
		t.Errorf("feature file: %v\n%s; want what Slurm has, published", err, data)
	}
}
