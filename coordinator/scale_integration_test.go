//go:build integration

package coordinator

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	"github.com/llmgw/llmgw/internal/slurmtest"
	"github.com/llmgw/llmgw/slurm"
)

// BenchmarkScale is issue 26's measurement at 10,000 nodes, each figure
// beside the same figure without llmgw: a slurmctld with 10,000 nodes
// (scripts/dev-cluster with LLMGW_DEV_EXTRA_NODES=9996 and
// LLMGW_DEV_EXTRA_STATE=cloud: cloud nodes, powered down and schedulable),
// a coordinator with 200 models of 64-character names, every node reporting
// a random mix of 0-8 of them, and the reconciler writing presence as
// ActiveFeatures. scripts/bench/scale.sh starts that cluster and runs this;
// it prints "scale:" lines that the script puts in its table.
//
// Phases, in order:
//  1. without llmgw: users' squeue, sbatch and sinfo latency on the idle
//     controller; the main scheduler's and backfill's cycles with a queue of
//     pending jobs (every cloud node held by one job, 200 jobs naming a model
//     through the comment, which job_submit.lua leaves alone without a
//     feature file); RPCs per minute meanwhile;
//  2. llmgw's first reconcile of the fresh cluster;
//  3. scontrol reconfigure, which wipes the features, then the full
//     reconcile after it: its time, its update RPCs against the distinct
//     presence sets and records (slurmctld's own counts, sdiag), and users'
//     squeue and sbatch latency while it runs, against their latency
//     just before and just after it (the jobs slurmctld holds, ended ones
//     included, grow through the run and slow every squeue);
//  4. the reconciler's loop for a minute: RPCs per minute in steady state;
//  5. the same queue as in 1 with llmgw's features on the nodes (like for
//     like: the features' own cost to the scheduler), then composed by
//     job_submit.lua from the feature file: the scheduler's cycles with
//     llmgw's features and preferences; users' sinfo with the
//     AvailableFeatures superset on every node;
//  6. the reconciler stopped, its features wiped: phase 1's figures again,
//     back to back with 5.
//
// It needs SLURM_CONF, root (sdiag -r) and LLMGW_SCALE=1, since it holds the
// machine for minutes.
func BenchmarkScale(b *testing.B) {
	conf := os.Getenv("SLURM_CONF")
	if conf == "" || os.Getenv("LLMGW_SCALE") == "" {
		b.Skip("needs SLURM_CONF and LLMGW_SCALE=1: run scripts/bench/scale.sh")
	}
	ctx := context.Background()
	run := &slurm.Runner{Timeout: 5 * time.Minute}
	nodes, err := run.Nodes(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var xs []string
	for _, n := range nodes {
		if strings.HasPrefix(n.Name, "x") {
			xs = append(xs, n.Name)
		}
	}
	if len(nodes) < 10000 {
		b.Skipf("%d nodes; scripts/bench/scale.sh starts 10,000", len(nodes))
	}
	say := func(format string, args ...any) { fmt.Printf("scale: "+format+"\n", args...) }
	// No feature file from an earlier run: without llmgw is without it.
	featureFile := filepath.Join(filepath.Dir(conf), "llmgw-features")
	if err := os.Remove(featureFile); err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	say("nodes %d", len(nodes))
	rel, _ := run.Run(ctx, "sinfo", "--version")
	say("slurm %s", strings.TrimSpace(string(rel)))

	// Every cloud node held by one job for the whole run, so that a queue
	// waits on Resources and every cycle tries it against all of them. A
	// cancelled job's nodes would stay powering up (no slurmd ever comes),
	// so it is never cancelled before the end.
	if _, err := run.Run(ctx, "sbatch", "-p", "extra", "-N", strconv.Itoa(len(xs)), "--exclusive", "-J", "llmgw-scale-fill",
		"-o", "/dev/null", "--wrap", "sleep 3600"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { run.Run(context.Background(), "scancel", "-n", "llmgw-scale-fill") })
	// The filler placed (its nodes powering up) and two backfill cycles
	// past it, so that neither queue's window sees the scheduler place it.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		out, _ := run.Run(ctx, "squeue", "-h", "-n", "llmgw-scale-fill", "-o", "%T")
		if st := strings.TrimSpace(string(out)); st != "" && st != "PENDING" {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the job holding the cloud nodes was not placed within 2 minutes")
		}
	}
	time.Sleep(12 * time.Second)
	queue := func(label string, jobs int, models []string) sdiagStats {
		b.Helper()
		rng := rand.New(rand.NewPCG(7, 7))
		for i := range jobs {
			args := []string{"-p", "extra", "-N1", "-J", "llmgw-scale-q", "-o", "/dev/null", "--wrap", "true"}
			if len(models) > 0 {
				args = append(args, "--comment=llmgw:model="+models[rng.IntN(len(models))])
			}
			if _, err := run.Run(ctx, "sbatch", args...); err != nil {
				b.Fatalf("queue job %d: %v", i, err)
			}
		}
		js, _ := run.Run(ctx, "squeue", "--json")
		withPrefer := len(preferred.FindAll(js, -1))
		sdiagReset(b, run)
		time.Sleep(scaleWindow)
		st := sdiag(b, run)
		say("%s queue: %d jobs pending (%d with a preference); main scheduler %d cycles, mean %d µs, max %d µs; backfill %d cycles, mean %d µs, max %d µs; %.0f RPCs/min",
			label, jobs, withPrefer, st.mainCycles, st.mainMean, st.mainMax, st.bfCycles, st.bfMean, st.bfMax, st.perMinute(scaleWindow))
		run.Run(ctx, "scancel", "-n", "llmgw-scale-q")
		return st
	}

	// 1. Without llmgw.
	recordsBefore := slurmtest.ConfigRecords(b, run, "debug")
	idle := probe(b, run, 20, nil)
	say("without llmgw, idle: squeue %s, sbatch %s, sinfo %s", idle.squeue, idle.sbatch, idle.sinfo)
	models := scaleModels()
	queue("without llmgw", scaleJobs, models)

	stateBefore := nodeStateMB(run)

	// 2. llmgw.
	// The reports are posted once: a report interval of an hour keeps
	// every node fresh for the whole run.
	e := newEnv(b, Config{Features: true, SlurmConf: conf, FeatureFile: featureFile,
		ReportInterval: time.Hour}, testTokens)
	e.srv.now = time.Now
	e.srv.features.run.Timeout = 5 * time.Minute
	for _, m := range models {
		if _, err := e.admin.PutModel(ctx, api.Model{Name: m, Source: "/lustre/models/" + m}); err != nil {
			b.Fatal(err)
		}
	}
	presence := scalePresence(nodes, models)
	sets := map[string]bool{}
	start := time.Now()
	for _, n := range nodes {
		slices.Sort(presence[n.Name])
		sets[strings.Join(presence[n.Name], ",")] = true
	}
	// Agents report at once from their own nodes: 16 at a time here.
	work := make(chan slurm.Node)
	var posted sync.WaitGroup
	for range 16 {
		posted.Add(1)
		go func() {
			defer posted.Done()
			for n := range work {
				var ws []api.Weight
				for _, m := range presence[n.Name] {
					ws = append(ws, api.Weight{Path: "/lustre/models/" + m, Shared: true, Complete: true, Size: 1})
				}
				if _, err := e.agent.PostReport(ctx, report(n.Name, "ib-x", 1, ws...)); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for _, n := range nodes {
		work <- n
	}
	close(work)
	posted.Wait()
	say("reports: %d nodes in %.1f s, %d distinct presence sets", len(nodes), time.Since(start).Seconds(), len(sets))
	reconcile := func(label string) api.FeatureSync {
		res, err := e.admin.SyncFeatures(ctx, false)
		if err != nil {
			b.Fatalf("%s: %v", label, err)
		}
		if res.Error != "" {
			b.Fatalf("%s: %s", label, res.Error)
		}
		say("%s: %.1f s, %d calls (%d to whole records), %d nodes changed, %.1f s of it pacing (share of slurmctld's time down to %.2f)",
			label, res.Duration, res.Calls, res.Records, res.Drifted, res.Paused, res.Share)
		return *res
	}
	reconcile("first reconcile, fresh cluster")
	// A node that holds a model, whose features show a wipe.
	holder := ""
	for _, x := range xs {
		if len(presence[x]) > 0 {
			holder = x
			break
		}
	}

	// wipe runs scontrol reconfigure, which drops every feature scontrol
	// set, and waits until slurmctld answers without them.
	wipe := func() {
		wiped := time.Now()
		if _, err := run.Run(ctx, "scontrol", "reconfigure"); err != nil {
			// Seen at 10,000 nodes right after a reconcile: slurmctld
			// busy (saving 146 MB of node state) past MessageTimeout.
			// The reconfigure may still happen: wait and look.
			say("scontrol reconfigure: %v", err)
		}
		waitAnswer(b, run)
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
			out, err := run.Run(ctx, "sinfo", "-h", "-N", "-n", holder, "-o", "%b")
			if err == nil && !strings.Contains(string(out), "llmgw.") {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the features were not wiped 2 minutes after scontrol reconfigure")
			}
		}
		say("scontrol reconfigure: slurmctld answered, the features wiped, %.1f s after", time.Since(wiped).Seconds())
	}

	// 3. A wipe, and the full reconcile after it: once at full speed (the
	// brake alone, which only answers the calls' own waits), once paced by
	// users' reads as the coordinator paces itself.
	for _, pacing := range []struct {
		label string
		pacer slurm.Pacer
	}{
		{"unpaced", slurm.Pacer{Share: 1, Target: 1e9}},
		{"paced", slurm.Pacer{}},
	} {
		e.srv.features.pacer = pacing.pacer
		wipe()
		// Users' latency idle, just before and just after the reconcile:
		// the baseline "during" compares with. A baseline from the start
		// of the run would not do: squeue's answer holds every job in
		// slurmctld's memory, ended ones too for MinJobAge (300 s here;
		// slurmctld packs each job whatever its state: _pack_job,
		// src/slurmctld/job_mgr.c, 22.05.8, and squeue drops them after),
		// and by now the queues and the probes have left hundreds (at
		// 22.05.8: squeue 7.2 ms over 1 job, 12.6 ms over about 650 with
		// no reconcile at all). Bracketed, the job table grows through
		// the three in step.
		jobsBefore := jobsInMemory(run)
		before := probe(b, run, 20, nil)
		sdiagReset(b, run)
		var during latencies
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			during = probe(b, run, 0, stop)
		}()
		res := reconcile("full reconcile after scontrol reconfigure, " + pacing.label)
		close(stop)
		wg.Wait()
		st := sdiag(b, run)
		jobsDuring := jobsInMemory(run)
		after := probe(b, run, 20, nil)
		jobsAfter := jobsInMemory(run)
		say("reconcile RPCs (sdiag), %s: %d update_node of %d in all; the goal is at most the distinct presence sets (%d) + 1 per record written (%d)",
			pacing.label, st.rpc["REQUEST_UPDATE_NODE"], st.total(), len(sets), res.Records)
		say("idle around the reconcile, %s: squeue %s before, %s after; sbatch %s before, %s after; jobs in slurmctld's memory %d, %d, %d",
			pacing.label, before.squeue, after.squeue, before.sbatch, after.sbatch, jobsBefore, jobsDuring, jobsAfter)
		idleSqueue, idleSbatch := bracket(before.squeue, after.squeue), bracket(before.sbatch, after.sbatch)
		say("during the reconcile, %s: squeue %s (%.2fx idle), sbatch %s (%.2fx idle)",
			pacing.label, during.squeue, during.squeue.ratio(idleSqueue), during.sbatch, during.sbatch.ratio(idleSbatch))
		say("during the reconcile, %s, against the idle controller of phase 1 (1 job in memory): squeue %.2fx, sbatch %.2fx",
			pacing.label, during.squeue.ratio(idle.squeue), during.sbatch.ratio(idle.sbatch))
	}
	e.srv.features.pacer = slurm.Pacer{}
	say("config records: %d before llmgw, %d after its reconciles", recordsBefore, slurmtest.ConfigRecords(b, run, "debug"))

	// 4. Steady state.
	sdiagReset(b, run)
	loopStop := make(chan struct{})
	e.srv.features.start(loopStop)
	time.Sleep(time.Minute)
	st := sdiag(b, run)
	say("steady state with llmgw: %.0f RPCs/min (%s)", st.perMinute(time.Minute), st.top(4))

	// 5. The queues with llmgw's features: first the very queue of phase
	// 1, no job asking for a model, which is what the features alone cost
	// the scheduler (like for like); then the same jobs naming models,
	// composed by job_submit.lua into preferences, which changes what the
	// scheduler tries per job.
	queue("with llmgw's features, no preference", scaleJobs, nil)
	queue("with llmgw", scaleJobs, models)
	with := probe(b, run, 20, nil)
	say("with llmgw, idle: squeue %s (%.2fx without), sbatch %s (%.2fx without), sinfo %s (%.2fx without)",
		with.squeue, with.squeue.ratio(idle.squeue), with.sbatch, with.sbatch.ratio(idle.sbatch), with.sinfo, with.sinfo.ratio(idle.sinfo))
	say("saved state: node_state %.1f MB without llmgw, %.1f MB with (slurmctld writes it whole after node changes)", stateBefore, nodeStateMB(run))

	// 6. Without llmgw again, back to back with 5: the reconciler stopped,
	// its features wiped. Phase 1 ran on a controller of another age
	// (before any reconfigure, the cloud nodes just powering up for the
	// filler, a job table of one), and its scheduler's cycles came out
	// ten times those of 5 with the same queue; these are the ones to
	// compare with.
	close(loopStop)
	e.srv.features.wait()
	wipe()
	again := probe(b, run, 20, nil)
	say("without llmgw again, idle: squeue %s (with llmgw %.2fx this), sbatch %s (%.2fx), sinfo %s (%.2fx)",
		again.squeue, with.squeue.ratio(again.squeue), again.sbatch, with.sbatch.ratio(again.sbatch), again.sinfo, with.sinfo.ratio(again.sinfo))
	queue("without llmgw again", scaleJobs, nil)
}

const (
	scaleModels_ = 200
	scaleJobs    = 200
	// scaleWindow is how long the scheduler is watched per queue: main
	// and backfill cycles every few seconds (scale.sh sets sched_interval
	// and bf_interval).
	scaleWindow = 30 * time.Second
)

// scaleModels is 200 model names of 64 characters, the longest the catalog
// takes.
func scaleModels() []string {
	out := make([]string, scaleModels_)
	for i := range out {
		out[i] = fmt.Sprintf("m%03d-%s", i, strings.Repeat("x", 59))
	}
	return out
}

// scalePresence gives each node a random mix of 0-8 of models: what local
// caches filled by Prolog fetches become after a few weeks.
func scalePresence(nodes []slurm.Node, models []string) map[string][]string {
	rng := rand.New(rand.NewPCG(26, 10000))
	out := map[string][]string{}
	for _, n := range nodes {
		seen := map[string]bool{}
		for range rng.IntN(9) {
			m := models[rng.IntN(len(models))]
			if !seen[m] {
				seen[m] = true
				out[n.Name] = append(out[n.Name], m)
			}
		}
	}
	return out
}

// latency is some command's wall times.
type latency []time.Duration

func (l latency) median() time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[len(s)/2]
}

func (l latency) String() string {
	if len(l) == 0 {
		return "no sample"
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return fmt.Sprintf("median %.1f ms (p90 %.1f ms, %d samples)", float64(s[len(s)/2].Microseconds())/1000,
		float64(s[len(s)*9/10].Microseconds())/1000, len(s))
}

func (l latency) ratio(base latency) float64 {
	if base.median() == 0 {
		return 0
	}
	return float64(l.median()) / float64(base.median())
}

type latencies struct{ squeue, sbatch, sinfo latency }

// probe times what a user runs: squeue, sbatch (a held job, cancelled
// after), and, when n > 0, sinfo; n rounds, or until stop closes.
func probe(b *testing.B, run *slurm.Runner, n int, stop chan struct{}) latencies {
	ctx := context.Background()
	var out latencies
	timed := func(l *latency, name string, args ...string) {
		t0 := time.Now()
		if _, err := run.Run(ctx, name, args...); err != nil {
			b.Errorf("%s: %v", name, err)
		}
		*l = append(*l, time.Since(t0))
	}
	for i := 0; n == 0 || i < n; i++ {
		if stop != nil {
			select {
			case <-stop:
				run.Run(ctx, "scancel", "-n", "llmgw-scale-probe")
				return out
			default:
			}
		}
		timed(&out.squeue, "squeue")
		// A held job, cancelled at once: held ones left pending would
		// grow squeue's answer sample by sample.
		t0 := time.Now()
		id, err := run.Run(ctx, "sbatch", "--parsable", "--hold", "-p", "extra", "-N1", "-J", "llmgw-scale-probe", "-o", "/dev/null", "--wrap", "true")
		out.sbatch = append(out.sbatch, time.Since(t0))
		if err != nil {
			b.Errorf("sbatch: %v", err)
		} else {
			run.Run(ctx, "scancel", strings.TrimSpace(string(id)))
		}
		if n > 0 {
			timed(&out.sinfo, "sinfo")
		}
		time.Sleep(100 * time.Millisecond)
	}
	run.Run(ctx, "scancel", "-n", "llmgw-scale-probe")
	return out
}

// bracket is the idle latency around a run: the mean of the medians just
// before and just after it, as one sample, so that what grows linearly
// through the three (the jobs in slurmctld's memory) cancels out.
func bracket(before, after latency) latency {
	return latency{(before.median() + after.median()) / 2}
}

// jobsInMemory counts the jobs slurmctld holds, ended ones included: what
// every squeue's answer carries.
func jobsInMemory(run *slurm.Runner) int {
	out, err := run.Run(context.Background(), "squeue", "-h", "-t", "all", "-o", "%i")
	if err != nil {
		return -1
	}
	return strings.Count(string(out), "\n")
}

// nodeStateMB is the size of slurmctld's saved node state, in MB.
func nodeStateMB(run *slurm.Runner) float64 {
	cfg, err := run.ShowConfig(context.Background())
	if err != nil {
		return -1
	}
	dir, _ := cfg.Get("StateSaveLocation")
	st, err := os.Stat(filepath.Join(dir, "node_state"))
	if err != nil {
		return -1
	}
	return float64(st.Size()) / 1e6
}

func waitAnswer(b *testing.B, run *slurm.Runner) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := run.Run(context.Background(), "sinfo", "-h", "-o", "%P"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("slurmctld did not answer within 2 minutes of the reconfigure")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sdiagStats is what the benchmark reads of sdiag: the main scheduler's and
// backfill's cycles, and the RPCs by type since the last reset.
type sdiagStats struct {
	mainCycles, mainMean, mainMax int
	bfCycles, bfMean, bfMax       int
	rpc                           map[string]int
}

func (s sdiagStats) total() int {
	n := 0
	for _, c := range s.rpc {
		n += c
	}
	return n
}

func (s sdiagStats) perMinute(d time.Duration) float64 {
	return float64(s.total()) / d.Minutes()
}

// top names the n RPC types most counted.
func (s sdiagStats) top(n int) string {
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range s.rpc {
		l = append(l, kv{k, v})
	}
	slices.SortFunc(l, func(a, b kv) int { return b.v - a.v })
	var out []string
	for i := 0; i < n && i < len(l); i++ {
		out = append(out, fmt.Sprintf("%s %d", l[i].k, l[i].v))
	}
	return strings.Join(out, ", ")
}

var (
	preferred  = regexp.MustCompile(`"prefer":\s*"[^"]*llmgw\.`)
	sdiagRPC   = regexp.MustCompile(`(?m)^\s*([A-Z_]+)\s+\(\s*\d+\)\s+count:\s*(\d+)`)
	sdiagField = regexp.MustCompile(`^\s*(Total cycles|Mean cycle|Max cycle):\s*(\d+)`)
)

func sdiagReset(b *testing.B, run *slurm.Runner) {
	if _, err := run.Run(context.Background(), "sdiag", "-r"); err != nil {
		b.Fatal(err)
	}
}

func sdiag(b *testing.B, run *slurm.Runner) sdiagStats {
	out, err := run.Run(context.Background(), "sdiag")
	if err != nil {
		b.Fatal(err)
	}
	st := sdiagStats{rpc: map[string]int{}}
	section := ""
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "Main schedule statistics"):
			section = "main"
		case strings.HasPrefix(line, "Backfilling stats"):
			section = "bf"
		case strings.HasPrefix(line, "Remote Procedure Call statistics by message type"):
			section = "rpc"
		case strings.HasPrefix(line, "Remote Procedure Call statistics by user"), strings.HasPrefix(line, "Pending RPC"):
			section = ""
		}
		if m := sdiagField.FindStringSubmatch(line); m != nil && (section == "main" || section == "bf") {
			v, _ := strconv.Atoi(m[2])
			p := map[string]map[string]*int{
				"main": {"Total cycles": &st.mainCycles, "Mean cycle": &st.mainMean, "Max cycle": &st.mainMax},
				"bf":   {"Total cycles": &st.bfCycles, "Mean cycle": &st.bfMean, "Max cycle": &st.bfMax},
			}[section][m[1]]
			*p = v
		}
		if section == "rpc" {
			if m := sdiagRPC.FindStringSubmatch(line); m != nil {
				v, _ := strconv.Atoi(m[2])
				st.rpc[m[1]] = v
			}
		}
	}
	return st
}
