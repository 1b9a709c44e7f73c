//go:build integration

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

// TestHubSwarmOnCluster is issue 25's "one origin read per fabric for
// repositories" on the dev cluster: a 2-node job in ib-b for a Hub model
// of 12 files (sizes no multiple of a swarm chunk) that no node holds. As
// in TestSwarmOnCluster everything is real: slurmd runs each node's Prolog
// and TaskProlog, each node has its own agent process whose chunk server
// listens on its own fabric address, credentials come from each node's own
// munged, and the Hub stand-in on 127.0.0.1 answers an LFS file with a
// redirect to its CDN and counts what it serves.
//
// The two Prologs, run at once, must cost the Hub one copy of the
// revision: one node reads it, the other gets it through the chunk
// servers, and each node's Hugging Face cache holds the verified snapshot,
// which the TaskProlog names. Seen failing as it should on main: the Hub
// served two copies, one per node.
func TestHubSwarmOnCluster(t *testing.T) {
	bin, sl := clusterBin(t)
	ctx := context.Background()
	conf := os.Getenv("SLURM_CONF")
	ctlMunge := devMungeSocket(t, conf, "")
	scontrol, sinfo := slurmTools(t)
	base := t.TempDir()
	coordConf := filepath.Join(base, "coordinator.toml")
	if err := os.WriteFile(coordConf, []byte(fmt.Sprintf("munge_socket = %q\n", ctlMunge)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, bin, base, "--config", coordConf, "--report-interval", "1s",
		"--slurm-conf", conf, "--scontrol", scontrol, "--sinfo", sinfo)

	// Twelve files, about 60 MiB in all, four 16 MiB-chunk boundaries
	// falling inside files and none on a file's edge; the CDN sends 32
	// MiB/s, so the second node reads the first one's chunks as they come.
	h, err := hubtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	const mib = 1 << 20
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	shard := func(n int) []byte {
		b := random(n)
		copy(b, []byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '})
		return b
	}
	files := map[string][]byte{
		"chat_template.jinja":              []byte("{% for m in messages %}{{ m['content'] }}{% endfor %}"),
		"config.json":                      []byte(`{"model_type":"llama"}`),
		"generation_config.json":           []byte(`{"do_sample":false}`),
		"merges.txt":                       bytes.Repeat([]byte("a b\n"), 300_000),
		"model-00001-of-00004.safetensors": shard(13*mib + 4321),
		"model-00002-of-00004.safetensors": shard(17*mib + 77),
		"model-00003-of-00004.safetensors": shard(9*mib - 5),
		"model-00004-of-00004.safetensors": shard(15*mib + 999),
		"model.safetensors.index.json":     []byte(`{"weight_map":{"a":"model-00001-of-00004.safetensors","b":"model-00002-of-00004.safetensors","c":"model-00003-of-00004.safetensors","d":"model-00004-of-00004.safetensors"}}`),
		"special_tokens_map.json":          []byte(`{"eos_token":"</s>"}`),
		"tokenizer.json":                   bytes.Repeat([]byte(`{"t":1}`), 500_000),
		"tokenizer_config.json":            []byte(`{}`),
	}
	commit := h.Commit("org/twelve", "main", files)
	var size int64
	for _, b := range files {
		size += int64(len(b))
	}
	h.Throttle(32 << 20)
	const model = "twelve"
	out, errs, err := runBin(t, bin, append(c.admin, "HF_ENDPOINT="+h.URL), "models", "add", model, "hf:org/twelve")
	if err != nil || !strings.Contains(out, commit) {
		t.Fatalf("models add %s: %v: %s%s", model, err, out, errs)
	}
	t.Cleanup(func() { runBin(t, bin, c.admin, "models", "rm", model) })

	hookDir := filepath.Join(filepath.Dir(conf), "llmgw")
	if err := os.MkdirAll(hookDir, 0o755); err != nil {
		t.Fatal(err)
	}
	hfOf := map[string]string{}
	for i, n := range devNodes {
		k := i + 1
		dir := filepath.Join(base, n)
		hfOf[n] = filepath.Join(dir, "cache", catalog.DefaultHFDir)
		for _, sub := range []string{"cache", "state", "run"} {
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		toml := fmt.Sprintf("coordinator = %q\nmunge_socket = %q\nnode = %q\nfabric = %q\npeer_addr = %q\nmetrics_listen = %q\nhf_endpoint = %q\n"+
			"cache_dir = %q\nstate_dir = %q\nrun_dir = %q\nsocket = %q\nreport_interval = \"1s\"\nscan_interval = \"1s\"\n",
			c.url, devMungeSocket(t, conf, n), n, e2eFabric[n], swarmPeerAddr(k), swarmMetricsAddr(k), h.URL,
			filepath.Join(dir, "cache"), filepath.Join(dir, "state"), filepath.Join(dir, "run"), filepath.Join(dir, "agent.sock"))
		path := filepath.Join(hookDir, n+".toml")
		if err := os.WriteFile(path, []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(path)
			os.Remove(nodeconf.ResolvedPath(path))
			os.Remove(hookDir)
		})
		daemon(t, bin, nil, "agent", "--config", path, "--node", n)
	}
	waitFor(t, 20*time.Second, "all four agents reporting to the coordinator", func() bool {
		out, _, err := runBin(t, bin, c.admin, "status", "--json")
		var st api.Status
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		for i := range devNodes {
			if _, err := agentMetrics(swarmMetricsAddr(i + 1)); err != nil {
				return false
			}
		}
		return st.Nodes.Total == len(devNodes) && st.Nodes.Stale == 0
	})

	before := scrapeAll(t)
	served := h.Served()
	jobOut := filepath.Join(t.TempDir(), "job.out")
	start := time.Now()
	o, err := sl.Run(ctx, "sbatch", "--parsable", "--comment=llmgw:model="+model, "-N2", "--ntasks-per-node=1", "--constraint=ib-b",
		"-J", "llmgw-hub-swarm", "-o", jobOut, "--wrap", `srun sh -c 'echo "node=$SLURMD_NODENAME path=$LLMGW_MODEL_PATH cache=$HF_HUB_CACHE"'`)
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	id := strings.TrimSpace(strings.Split(string(o), ";")[0])
	t.Cleanup(func() { sl.Run(context.Background(), "scancel", id) })
	j := (&e2e{bin: bin, sl: sl}).wait(t, id)
	took := time.Since(start)
	jo, _ := os.ReadFile(jobOut)
	t.Logf("job %s on %s in %.1f s:\n%s", j.ID, j.NodeList, took.Seconds(), jo)
	if j.State != "COMPLETED" || j.NodeList != "n[3-4]" {
		t.Fatalf("the ib-b job: %s on %s; want COMPLETED on n[3-4]", j.State, j.NodeList)
	}
	for _, n := range []string{"n3", "n4"} {
		snap := catalog.HubSnapshotDir(hfOf[n], "org/twelve", commit)
		want := fmt.Sprintf("node=%s path=%s cache=%s", n, snap, hfOf[n])
		if !slices.Contains(strings.Split(strings.TrimSpace(string(jo)), "\n"), want) {
			t.Errorf("the job's output lacks %q", want)
		}
		for p, b := range files {
			if got, err := os.ReadFile(filepath.Join(snap, p)); err != nil || !bytes.Equal(got, b) {
				t.Errorf("%s: %s in its snapshot is not the Hub's file (%v)", n, p, err)
			}
		}
		if ref, _ := os.ReadFile(catalog.HubRefPath(hfOf[n], "org/twelve", "main")); string(ref) != commit {
			t.Errorf("%s: refs/main = %q, want %s", n, ref, commit)
		}
	}

	got := h.Served() - served
	t.Logf("for ib-b the Hub served %d bytes for a %d-byte revision (%.3f copies)", got, size, float64(got)/float64(size))
	if got < size || got > size+api.DefaultChunkSize {
		t.Errorf("the Hub served %d bytes for ib-b's two nodes; want one copy of the revision (%d), not one per node", got, size)
	}
	after := scrapeAll(t)
	seed, relay := "n3", "n4"
	if after["n4"].minus(before["n4"]).origin > after["n3"].minus(before["n3"]).origin {
		seed, relay = "n4", "n3"
	}
	s, r := after[seed].minus(before[seed]), after[relay].minus(before[relay])
	t.Logf("%s: %.0f from the Hub, %.0f from peers, served %.0f; %s: %.0f from the Hub, %.0f from peers, served %.0f",
		seed, s.origin, s.peer, s.served, relay, r.origin, r.peer, r.served)
	if r.origin != 0 || r.peer != float64(size) {
		t.Errorf("want %s to get the whole revision from %s's chunk server and nothing from the Hub; got %+v", relay, seed, r)
	}
	for _, n := range []string{"n1", "n2"} {
		if d := after[n].minus(before[n]); d != (swarmFigures{}) {
			t.Errorf("%s (ib-a) moved bytes for ib-b's job: %+v", n, d)
		}
	}
	noneDrained(t, sl)
}
