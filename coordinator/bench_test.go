package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/table"
	"github.com/llmgw/llmgw/weights/catalog"
)

// The coordinator's targets (docs/design.md §6 and issue 5): ingest at least
// 5,000 reports/s on 2 cores with 10,000 nodes reporting 50 weights each,
// and `llmgw status` over 10,000 nodes × 200 models within 300 ms.
const (
	benchNodes      = 10000
	benchModels     = 200
	benchWeights    = 50
	benchFabrics    = 4
	benchClients    = 64
	targetReportsPS = 5000
	targetStatusMS  = 300
)

// benchCluster builds the catalog and one report body per node. A quarter of
// the models sit on each fabric's shared filer, half are fetched into node
// caches, a quarter are hub ids; each node sees 50 of the 200, so every
// model has holders of some kind on every fabric.
func benchCluster() (models []api.Model, reports []*api.Report) {
	for i := range benchModels {
		m := api.Model{Name: fmt.Sprintf("model-%03d", i), Size: int64(1+i%70) * 1e9}
		switch i % 4 {
		case 0:
			m.Source = fmt.Sprintf("/lustre/models/model-%03d", i)
		case 1, 2:
			m.Source = fmt.Sprintf("hf:org%d/repo-%03d/model-%03d-q4_k_m.gguf", i%7, i, i)
		case 3:
			m.Source = fmt.Sprintf("org%d/model-%03d-instruct", i%5, i)
		}
		models = append(models, m)
	}
	for n := range benchNodes {
		r := &api.Report{
			ID: fmt.Sprintf("r-%d", n), Seq: 1, Started: t0, Time: t0,
			Node: fmt.Sprintf("gpu%05d", n), Fabric: fmt.Sprintf("ib-%c", 'a'+n%benchFabrics),
			Looked: n%97 != 0, AgentVersion: "bench",
			Cache: api.Cache{Dir: "/var/cache/llmgw", FreeBytes: 2e12, TotalBytes: 4e12},
		}
		if r.Looked {
			for k := range benchWeights {
				m := models[(n*3+k*4+k/13)%benchModels]
				w := api.Weight{Size: m.Size, Complete: true}
				switch catalog.KindOf(m.Source) {
				case catalog.KindPath:
					w.Path, w.Shared = m.Source, true
				case catalog.KindRemote:
					w.Path = catalog.CachePathFor(r.Cache.Dir, m.Source)
				case catalog.KindModelID:
					w.Path = "/var/cache/hf/hub/models--" + m.Source + "/snapshots/0123456789abcdef"
					w.ModelID, w.Revision = m.Source, "0123456789abcdef"
				}
				r.Weights = append(r.Weights, w)
			}
			sort.Slice(r.Weights, func(i, j int) bool { return r.Weights[i].Path < r.Weights[j].Path })
		}
		reports = append(reports, r)
	}
	return models, reports
}

// batchSize is the mean number of reports per commit the writer made
// since the counts were b0 batches and r0 reports.
func batchSize(s *Server, b0, r0 int64) float64 {
	if n := s.batches.Load() - b0; n > 0 {
		return float64(s.batched.Load()-r0) / float64(n)
	}
	return 0
}

// postAll sends the pre-encoded bodies from benchClients connections and
// returns reports per second. Encoding happens before the clock starts:
// agents run on their own nodes, not on the coordinator's two cores. auths
// are the bodies' Authorization headers (MUNGE credentials or nodes' own
// tokens, made before the clock starts for the same reason). clientTLS,
// when not nil, is how the clients trust a coordinator served over TLS.
func postAll(b *testing.B, phase, url string, clientTLS *tls.Config, bodies [][]byte, auths []string) (rate, cpuPerReport float64) {
	defer phaseProfile(b, phase)()
	tr := &http.Transport{MaxIdleConnsPerHost: benchClients, MaxConnsPerHost: benchClients, TLSClientConfig: clientTLS}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuTime()
	for range benchClients {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(bodies)) {
					return
				}
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/reports", bytes.NewReader(bodies[i]))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", auths[i])
				resp, err := hc.Do(req)
				if err != nil {
					failed.Store(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					failed.Store(fmt.Errorf("report %d: %s", i, resp.Status))
					return
				}
			}
		})
	}
	wg.Wait()
	took, cpu := time.Since(start), cpuTime()-cpu0
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return float64(len(bodies)) / took.Seconds(), float64(cpu.Microseconds()) / float64(len(bodies))
}

// nodeTokens gives every report's node its own token, as `llmgw nodes
// token` does, and returns the reports' Authorization headers. The tokens
// are stored one by one and loaded once: minting 10,000 through the API
// reloads the whole table each time.
func nodeTokens(b *testing.B, e *testEnv, reports []*api.Report) []string {
	ctx := context.Background()
	out := make([]string, len(reports))
	for i, r := range reports {
		tok := fmt.Sprintf("llmgw-node-bench-%d", i)
		if err := e.db.SetNodeToken(ctx, r.Node, sha256.Sum256([]byte(tok)), t0); err != nil {
			b.Fatal(err)
		}
		out[i] = "Bearer " + tok
	}
	if err := e.srv.loadNodeTokens(ctx); err != nil {
		b.Fatal(err)
	}
	return out
}

func encodeAll(b *testing.B, reports []*api.Report, seq int64) [][]byte {
	bodies := make([][]byte, len(reports))
	for i, r := range reports {
		r.Seq = seq
		body, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = body
	}
	return bodies
}

// timeStatus runs what `llmgw status` does (GET /v1/status, decode, render
// the table) n times and returns the median.
func timeStatus(b *testing.B, url string, n int, do func(c *api.Client) error) time.Duration {
	c := &api.Client{BaseURL: url}
	var ds []time.Duration
	for range n {
		start := time.Now()
		if err := do(c); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// BenchmarkCoordinator measures ingest and status at cluster scale, over
// real HTTP on 127.0.0.1 and a real database file. Run it through
// scripts/bench/coordinator.sh, which prints the figures against the
// targets; -benchtime=1x, since one pass takes some seconds.
func BenchmarkCoordinator(b *testing.B) {
	ctx := context.Background()
	models, reports := benchCluster()
	first := encodeAll(b, reports, 1)
	var size int
	for _, body := range first {
		size += len(body)
	}
	b.Logf("%d nodes × %d weights, %d catalog models, %d fabrics; %.1f MB of reports per round",
		benchNodes, benchWeights, benchModels, benchFabrics, float64(size)/1e6)
	steady := encodeAll(b, reports, 2)

	for b.Loop() {
		e := newEnv(b, Config{}, testTokens)
		e.srv.now = time.Now
		for _, m := range models {
			if _, err := e.admin.PutModel(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		auths := nodeTokens(b, e, reports)
		b0, r0 := e.srv.batches.Load(), e.srv.batched.Load()
		firstRate, firstCPU := postAll(b, "first", e.url, nil, first, auths)
		firstBatch := batchSize(e.srv, b0, r0)
		b0, r0 = e.srv.batches.Load(), e.srv.batched.Load()
		steadyRate, steadyCPU := postAll(b, "steady", e.url, nil, steady, auths)
		steadyBatch := batchSize(e.srv, b0, r0)

		status := timeStatus(b, e.url, 7, func(c *api.Client) error {
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			if st.Nodes.Total != benchNodes || len(st.Models) != benchModels {
				return fmt.Errorf("status has %d nodes and %d models", st.Nodes.Total, len(st.Models))
			}
			return table.WriteStatus(io.Discard, st)
		})
		one := timeStatus(b, e.url, 7, func(c *api.Client) error {
			st, err := c.ModelStatus(ctx, models[1].Name)
			if err != nil {
				return err
			}
			return table.WriteModelNodes(io.Discard, st)
		})
		start := time.Now()
		if _, err := e.admin.PutModel(ctx, api.Model{Name: "late", Source: "/lustre/models/late"}); err != nil {
			b.Fatal(err)
		}
		catalog := time.Since(start)

		b.ReportMetric(firstRate, "first-reports/s")
		b.ReportMetric(steadyRate, "steady-reports/s")
		b.ReportMetric(float64(status.Microseconds())/1000, "status-ms")
		b.ReportMetric(float64(one.Microseconds())/1000, "model-status-ms")
		b.ReportMetric(float64(catalog.Microseconds())/1000, "catalog-put-ms")
		b.ReportMetric(firstCPU, "first-cpu-µs/report")
		b.ReportMetric(steadyCPU, "steady-cpu-µs/report")
		fmt.Printf("ingest, first reports (all presence new): %8.0f reports/s  (target %d: %.2f×); %4.0f µs CPU per report, clients included; %.1f reports per commit\n", firstRate, targetReportsPS, firstRate/targetReportsPS, firstCPU, firstBatch)
		fmt.Printf("ingest, steady state (same weights):      %8.0f reports/s  (target %d: %.2f×); %4.0f µs CPU per report, clients included; %.1f reports per commit\n", steadyRate, targetReportsPS, steadyRate/targetReportsPS, steadyCPU, steadyBatch)
		fmt.Printf("llmgw status, %d nodes × %d models:  %8.1f ms        (target %d ms: %.2f× the budget)\n", benchNodes, benchModels, float64(status.Microseconds())/1000, targetStatusMS, float64(status.Milliseconds())/targetStatusMS)
		fmt.Printf("llmgw status MODEL, %d nodes:            %8.1f ms\n", benchNodes, float64(one.Microseconds())/1000)
		fmt.Printf("catalog change with rematch over %d rows: %6.1f ms\n", benchNodes*benchWeights, float64(catalog.Microseconds())/1000)
	}
}

// phaseProfile writes a CPU profile of one phase of a benchmark (first
// reports, steady state) to $LLMGW_BENCH_CPUPROFILE/<benchmark>-<phase>.pprof
// when that variable names a directory, and returns the function that ends
// it. The phases cost differently (a first report writes its presence, a
// later one does not), and -cpuprofile would mix them with the setup, which
// encodes and authenticates 20,000 reports.
func phaseProfile(b *testing.B, phase string) func() {
	dir := os.Getenv("LLMGW_BENCH_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(b.Name())
	f, err := os.Create(filepath.Join(dir, name+"-"+phase+".pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatalf("%v (LLMGW_BENCH_CPUPROFILE cannot be used with -cpuprofile)", err)
	}
	var tf *os.File
	if os.Getenv("LLMGW_BENCH_TRACE") != "" {
		if tf, err = os.Create(filepath.Join(dir, name+"-"+phase+".trace")); err != nil {
			b.Fatal(err)
		}
		trace.Start(tf)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if tf != nil {
			trace.Stop()
			tf.Close()
		}
	}
}

// cpuTime is the CPU time this process has used. On a shared machine the
// wall-clock rate depends on what else runs; the CPU cost per report does
// not, so the benchmark prints both.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
