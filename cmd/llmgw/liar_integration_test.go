//go:build integration

package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/swarmtest"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestSwarmLiarOnCluster is issue 24's small liar case on the dev cluster:
// a 3-node job whose nodes (n1-n3) fetch the model through their fabric's
// swarm, and on n4, the fourth node of the fabric, a hostile member
// instead of an agent (api/swarmtest), speaking the protocols with
// n4's own munged: what root on n4 can do. One fabric, "lab", as a site
// with one fabric has it (no fabric_features: the nodes' word, which the
// dev cluster's two Slurm fabrics do not then contradict).
//
// The liar is the worst the first pass left open: it asks first, so it
// holds the origin lease; it says it reads, publishes made-up digests and
// serves bytes that match them, so every chunk the honest nodes read from
// it passes its check and only their whole files fail the pin. Each then
// names the digests it used, the coordinator refutes the liar, and the
// next read proceeds: the job completes with every node's
// LLMGW_MODEL_PATH the pinned bytes, the origin served one copy (and at
// most two chunks more), and `llmgw status` and /metrics name the liar.
//
// Seen failing as it should before the fix: the Prologs failed the pin
// (the job did not run; the nodes were drained) and the liar kept the
// lease with its digests published.
func TestSwarmLiarOnCluster(t *testing.T) {
	bin, sl := clusterBin(t)
	ctx := context.Background()
	conf := os.Getenv("SLURM_CONF")
	scontrol, sinfo := slurmTools(t)
	e := &e2e{bin: bin, sl: sl}
	base := t.TempDir()
	const chunk = 1 << 20
	coordConf := filepath.Join(base, "coordinator.toml")
	if err := os.WriteFile(coordConf, []byte(fmt.Sprintf("munge_socket = %q\nswarm_min_chunk = %d\n", devMungeSocket(t, conf, ""), chunk)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCoordinator(t, bin, base, "--config", coordConf, "--report-interval", "1s",
		"--slurm-conf", conf, "--scontrol", scontrol, "--sinfo", sinfo)

	// Eight chunks and a piece, random; the origin sends 8 MiB/s.
	data := make([]byte, 8*chunk+12345)
	rand.Read(data)
	size := int64(len(data))
	digest := sha256.Sum256(data)
	sum := hex.EncodeToString(digest[:])
	origin := &throttledOrigin{data: data, rate: 8 << 20}
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	osrv := &http.Server{Handler: origin}
	go osrv.Serve(ol)
	t.Cleanup(func() { osrv.Close() })
	src := "http://" + ol.Addr().String() + "/m/liar.gguf"
	const model = "liar"
	if out, errs, err := runBin(t, bin, c.admin, "models", "add", model, src, "--sha256", sum, "--size", strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("models add %s: %v: %s%s", model, err, out, errs)
	}
	t.Cleanup(func() { runBin(t, bin, c.admin, "models", "rm", model) })

	honest := []string{"n1", "n2", "n3"}
	lab := map[string]string{"n1": "lab", "n2": "lab", "n3": "lab"}
	cacheOf := swarmAgents(t, bin, c, base, honest, lab)

	// The liar on n4, with n4's munged, its chunk server on n4's address.
	lctx, stop := context.WithCancel(ctx)
	liar := &swarmtest.Member{Node: "n4", Fabric: "lab", Addr: "127.0.0.14:0",
		Coord:  &api.Client{BaseURL: c.url, Auth: munge.Authenticator{Codec: munge.New(devMungeSocket(t, conf, "n4"))}},
		Source: src, SHA256: sum, Size: size, ChunkSize: chunk, MadeUpSums: true, Serve: swarmtest.ServeForged, FakeOriginBytes: chunk}
	if err := liar.Run(lctx); err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		<-liar.Done()
	})
	waitFor(t, 10*time.Second, "the liar holding the origin lease", func() bool { return liar.LastPlan().Lease })

	jobOut := filepath.Join(t.TempDir(), "job.out")
	start := time.Now()
	out, err := sl.Run(ctx, "sbatch", "--parsable", "--comment=llmgw:model="+model, "-N3", "-w", "n[1-3]", "--ntasks-per-node=1",
		"-J", "llmgw-swarm-liar", "-o", jobOut, "--wrap", `srun sh -c 'echo "node=$SLURMD_NODENAME path=$LLMGW_MODEL_PATH"'`)
	if err != nil {
		t.Fatalf("sbatch: %v", err)
	}
	id := strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Cleanup(func() { sl.Run(context.Background(), "scancel", id) })
	j := e.wait(t, id)
	took := time.Since(start)
	lines, _ := os.ReadFile(jobOut)
	t.Logf("job %s on %s in %.1f s (the liar answered %v):\n%s", j.ID, j.NodeList, took.Seconds(), liar.Answers(), lines)
	if j.State != "COMPLETED" || j.NodeList != "n[1-3]" {
		t.Fatalf("the job: %s on %s; want COMPLETED on n[1-3]", j.State, j.NodeList)
	}
	if liar.Answers()[http.StatusPartialContent] == 0 {
		t.Fatal("no node read the liar's bytes: the case did not happen")
	}
	for _, n := range honest {
		path := catalog.CachePathFor(cacheOf[n], src)
		if !slices.Contains(strings.Split(strings.TrimSpace(string(lines)), "\n"), fmt.Sprintf("node=%s path=%s", n, path)) {
			t.Errorf("the job's output lacks %s's path %s", n, path)
		}
		b, err := os.ReadFile(path)
		if got := sha256.Sum256(b); err != nil || got != digest {
			t.Errorf("%s's cache: %d bytes (%v); want the pinned file", n, len(b), err)
		}
	}
	sent := origin.sent.Load()
	t.Logf("the origin sent %d bytes for a %d-byte file (%.3f copies)", sent, size, float64(sent)/float64(size))
	if sent > size+2*chunk {
		t.Errorf("the origin sent %d bytes; one copy and two chunks are %d", sent, size+2*chunk)
	}

	// Status names the liar, in JSON and in the table an admin reads.
	outJSON, errs, err := runBin(t, bin, c.admin, "status", "--json")
	var st api.Status
	if err != nil || json.Unmarshal([]byte(outJSON), &st) != nil {
		t.Fatalf("llmgw status --json: %v: %s", err, errs)
	}
	var g *api.SwarmStatus
	for i := range st.Swarms {
		if st.Swarms[i].Source == src {
			g = &st.Swarms[i]
		}
	}
	if g == nil || !slices.Contains(g.Refuted, "n4") || !slices.Contains(g.LeaseRevoked, "n4") {
		t.Errorf("status's swarm: %+v; want n4 refuted and its lease revoked", g)
	}
	text, _, _ := runBin(t, bin, c.admin, "status")
	if row := strings.Join(statusRow(text, "LEASE HOLDER", "lab"), " "); !strings.Contains(row, "digests refuted n4") || !strings.Contains(row, "lease revoked n4") {
		t.Errorf("llmgw status's swarm row for lab: %q; want the liar named", row)
	}
	cm, err := scrape(c.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{`llmgw_coordinator_swarm_refuted_members{fabric="lab"}`, `llmgw_coordinator_swarm_lease_revoked_members{fabric="lab"}`} {
		if cm[series] < 1 {
			t.Errorf("coordinator metric %s = %v; want the liar counted", series, cm[series])
		}
	}
	noneDrained(t, sl)
}
