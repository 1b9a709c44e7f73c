//go:build integration

package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// TestPrefetchReplay is scripts/bench/prefetch.sh's replay (issue 28): a
// synthetic queue replayed on the dev cluster with prefetch off and on,
// printing the figures the issue asks for. It runs only when
// LLMGW_BENCH_PREFETCH is set (the script sets it), as it takes minutes.
//
// The queue (fixed seed, LLMGW_BENCH_SEED, default 28): LLMGW_BENCH_JOBS
// jobs (default 200) arriving at random (exponential gaps, mean 1.2 s),
// each for one of 16 models of 8-40 MiB that no node holds at the start,
// on one node or two, running 2-10 s with a time limit of one minute (so
// backfill plans behind running jobs, as it does with jobs of known
// length). Every model comes from an origin that sends 4 MiB/s per
// connection, so one fetch (2-10 s) takes as long as or longer than a
// backfill interval (5 s on the dev cluster). "off" runs the prefetcher
// with a budget of one byte per node: it reads and counts exactly as "on"
// does, and asks no node anything.
func TestPrefetchReplay(t *testing.T) {
	if os.Getenv("LLMGW_BENCH_PREFETCH") == "" {
		t.Skip("the prefetch replay is a benchmark: scripts/bench/prefetch.sh runs it")
	}
	jobs, _ := strconv.Atoi(os.Getenv("LLMGW_BENCH_JOBS"))
	if jobs <= 0 {
		jobs = 200
	}
	seed, _ := strconv.ParseUint(os.Getenv("LLMGW_BENCH_SEED"), 10, 64)
	if seed == 0 {
		seed = 28
	}
	modes := []string{"off", "on"}
	if m := os.Getenv("LLMGW_BENCH_MODES"); m != "" {
		modes = strings.Fields(m)
	}
	var res []replayResult
	for _, mode := range modes {
		r := runReplay(t, mode, jobs, seed)
		res = append(res, r)
	}
	fmt.Printf("\nprefetch replay: %d jobs, seed %d, %d models, origin %d MiB/s per connection, bf_interval %s\n",
		jobs, seed, replayModels, replayRate>>20, res[0].bf)
	fmt.Printf("%-58s", "figure")
	for _, r := range res {
		fmt.Printf(" %14s", "prefetch "+r.mode)
	}
	fmt.Printf("  goal\n")
	row := func(name, goal string, f func(replayResult) string) {
		fmt.Printf("%-58s", name)
		for _, r := range res {
			fmt.Printf(" %14s", f(r))
		}
		fmt.Printf("  %s\n", goal)
	}
	pct := func(a, b int) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%d/%d %3.0f%%", a, b, 100*float64(a)/float64(b))
	}
	row("warm starts, all jobs", "", func(r replayResult) string { return pct(r.warm, r.counted) })
	row("warm starts, jobs planned >= one fetch time ahead", ">= 80% (on)", func(r replayResult) string { return pct(r.eligibleWarm, r.eligible) })
	row("allocation to first task, warm jobs, median (s)", "<= fast path", func(r replayResult) string { return secs(median(r.warmLat)) })
	row("allocation to first task, cold jobs, median (s)", "", func(r replayResult) string { return secs(median(r.coldLat)) })
	row("prefetched bytes no job used", "<= 25%", func(r replayResult) string {
		if r.fetched == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%% of %s", 100*float64(r.fetched-r.used)/float64(r.fetched), mib(r.fetched))
	})
	row("jobs whose start llmgw held (default mode)", "0", func(r replayResult) string { return strconv.Itoa(r.held) })
	// Counted over the intervals the replay touched, the one under way
	// included: N reads a whole interval apart span N-1 intervals.
	row("llmgw's calls to slurmctld per backfill interval", "<= 1", func(r replayResult) string {
		return fmt.Sprintf("%.0f/%d", r.calls, int(r.took/r.bf)+1)
	})
	row("replay took (s)", "", func(r replayResult) string { return secs(r.took.Seconds()) })
}

const (
	replayModels = 16
	replayRate   = 4 << 20
)

type replayResult struct {
	mode                   string
	counted, warm          int
	eligible, eligibleWarm int
	warmLat, coldLat       []float64
	fetched, used          int64
	held                   int
	calls                  float64
	took                   time.Duration
	bf                     time.Duration
}

func secs(s float64) string {
	if s < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", s)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return -1
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// multiOrigin serves several files by path, each connection at rate.
type multiOrigin struct {
	files map[string][]byte
	rate  int64
}

func (o *multiOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, ok := o.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	to := &throttledOrigin{data: data, rate: o.rate}
	to.ServeHTTP(w, r)
}

var allocRe = regexp.MustCompile(`^\[(\S+)\] (?:sched: Allocate|backfill: Started|sched/backfill: _start_job: Started) JobId=(\d+)`)

func runReplay(t *testing.T, mode string, jobs int, seed uint64) replayResult {
	bin, sl := clusterBin(t)
	ctx := context.Background()
	conf := os.Getenv("SLURM_CONF")
	base := t.TempDir()
	var flags []string
	if mode == "off" {
		flags = append(flags, "--prefetch-max-bytes", "1")
	}
	c := prefetchCoordinator(t, bin, base, flags...)

	rng := rand.New(rand.NewPCG(seed, 28))
	mo := &multiOrigin{files: map[string][]byte{}, rate: replayRate}
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mo}
	go srv.Serve(ol)
	defer srv.Close()
	sizes := map[string]int64{}
	for i := range replayModels {
		name := fmt.Sprintf("rp%02d", i)
		data := make([]byte, (8+rng.IntN(33))<<20)
		for k := range data {
			data[k] = byte(rng.Uint32())
		}
		path := "/m/" + name + ".gguf"
		mo.files[path] = data
		sizes[name] = int64(len(data))
		sum := sha256.Sum256(data)
		if out, errs, err := runBin(t, bin, c.admin, "models", "add", name, "http://"+ol.Addr().String()+path,
			"--sha256", hex.EncodeToString(sum[:]), "--size", strconv.Itoa(len(data))); err != nil {
			t.Fatalf("models add %s: %v: %s%s", name, err, out, errs)
		}
	}

	_, agents := prefetchAgents(t, bin, base, c.url)
	defer func() {
		for _, a := range agents {
			a.Process.Kill()
			a.Wait()
		}
		c.cmd.Process.Kill()
		c.cmd.Wait()
	}()
	status := func() (api.Status, bool) {
		st, err := prefetchStatus(t, bin, c)
		return st, err == nil
	}
	waitFor(t, 30*time.Second, "agents reporting", func() bool {
		st, ok := status()
		return ok && st.Nodes.Total == len(devNodes) && st.Nodes.Stale == 0 && st.Prefetch != nil && st.Prefetch.Interval > 0
	})
	bf := time.Duration(status2(status).Prefetch.Interval * float64(time.Second))

	// The harness watches (its own calls are not llmgw's): the
	// coordinator's status each second for when a plan was first acted
	// on, and squeue's reasons for any job held for a burst buffer.
	var mu sync.Mutex
	asked := map[string]time.Time{}
	held := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if st, ok := status(); ok && st.Prefetch != nil {
				mu.Lock()
				for _, j := range st.Prefetch.Jobs {
					if _, ok := asked[j.Job]; !ok && (j.State == api.PlanAsked || j.State == api.PlanWarm) {
						asked[j.Job] = time.Now()
					}
				}
				mu.Unlock()
			}
			if out, err := sl.Run(ctx, "squeue", "-h", "-t", "PD", "-o", "%i %r"); err == nil {
				mu.Lock()
				for _, l := range strings.Split(string(out), "\n") {
					if id, r, ok := strings.Cut(strings.TrimSpace(l), " "); ok && strings.Contains(strings.ToLower(r), "burst") {
						held[id] = true
					}
				}
				mu.Unlock()
			}
		}
	})

	outDir := filepath.Join(base, "out")
	os.MkdirAll(outDir, 0o777)
	callsBefore := coordCalls(t, c.url)
	startAt := time.Now()
	type sub struct {
		id, model string
	}
	var subs []sub
	jr := rand.New(rand.NewPCG(seed, 2028))
	for i := range jobs {
		model := fmt.Sprintf("rp%02d", jr.IntN(replayModels))
		nodes := 1
		if jr.IntN(10) < 3 {
			nodes = 2
		}
		length := 2 + jr.IntN(9)
		gap := time.Duration(jr.ExpFloat64() * 1.2 * float64(time.Second))
		out, err := sl.Run(ctx, "sbatch", "--parsable", "-N", strconv.Itoa(nodes), "-t", "1", "-J", fmt.Sprintf("rp-%d", i),
			"--comment=llmgw:model="+model, "-o", filepath.Join(outDir, "%j.out"),
			"--wrap", fmt.Sprintf("date +%%s.%%N; sleep %d", length))
		if err != nil {
			t.Fatalf("sbatch: %v", err)
		}
		subs = append(subs, sub{strings.TrimSpace(strings.Split(string(out), ";")[0]), model})
		time.Sleep(gap)
	}
	waitFor(t, 30*time.Minute, "the replay's jobs to end", func() bool {
		out, err := sl.Run(ctx, "squeue", "-h", "-n", strings.Join(func() []string {
			var n []string
			for i := range jobs {
				n = append(n, fmt.Sprintf("rp-%d", i))
			}
			return n
		}(), ","), "-o", "%i")
		return err == nil && strings.TrimSpace(string(out)) == ""
	})
	took := time.Since(startAt)
	calls := coordCalls(t, c.url) - callsBefore
	// Let the last starts reach the coordinator.
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	st := status2(status)

	// Allocation times from slurmctld's log (millisecond stamps).
	alloc := map[string]time.Time{}
	if f, err := os.Open(filepath.Join(filepath.Dir(conf), "log", "slurmctld.log")); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if m := allocRe.FindStringSubmatch(sc.Text()); m != nil {
				if ts, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local); err == nil {
					alloc[m[2]] = ts
				}
			}
		}
		f.Close()
	}
	warmOf := map[string]bool{}
	for _, s := range st.Prefetch.Starts {
		warmOf[s.Job] = s.Warm
	}
	r := replayResult{mode: mode, took: took, bf: bf, calls: calls, fetched: st.Prefetch.Bytes.Fetched, used: st.Prefetch.Bytes.Used, held: len(held)}
	for _, s := range subs {
		w, ok := warmOf[s.id]
		if !ok {
			continue
		}
		r.counted++
		if w {
			r.warm++
		}
		b, _ := os.ReadFile(filepath.Join(outDir, s.id+".out"))
		first, _ := strconv.ParseFloat(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]), 64)
		lat := -1.0
		if a, ok := alloc[s.id]; ok && first > 0 {
			lat = first - float64(a.UnixNano())/1e9
		}
		if lat >= 0 {
			if w {
				r.warmLat = append(r.warmLat, lat)
			} else {
				r.coldLat = append(r.coldLat, lat)
			}
		}
		mu.Lock()
		at, wasAsked := asked[s.id]
		mu.Unlock()
		fetch := time.Duration(float64(sizes[s.model]) / replayRate * float64(time.Second))
		if a, ok := alloc[s.id]; ok && wasAsked && a.Sub(at) >= fetch {
			r.eligible++
			if w {
				r.eligibleWarm++
			}
		}
	}
	t.Logf("mode %s: %d jobs counted of %d, %d warm; %d planned a fetch time ahead, %d of them warm", mode, r.counted, len(subs), r.warm, r.eligible, r.eligibleWarm)
	return r
}

func status2(f func() (api.Status, bool)) api.Status {
	st, _ := f()
	if st.Prefetch == nil {
		st.Prefetch = &api.PrefetchSummary{}
	}
	return st
}

func coordCalls(t *testing.T, url string) float64 {
	m, err := scrape(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m["llmgw_coordinator_prefetch_slurm_calls_total"]
}
