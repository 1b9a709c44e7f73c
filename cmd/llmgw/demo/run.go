package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// About is what `llmgw demo --help` says.
const About = `Runs the whole of llmgw on this machine, with nothing to configure, and says
what each step shows: a coordinator on a temporary database; agents for four
simulated nodes in two fabrics, one fabric seeing a shared filer (a real FUSE
mount with bindfs when run as root where /dev/fuse exists, else a plain
directory, labelled as simulated); a local origin serving generated weights;
three models registered; one fetched with its progress; llmgw status (and
llmgw place) with what each line means; and, when the dev cluster is up
(scripts/dev-cluster), a real job submitted with llmgw sbatch.

Every process, mount and file it makes is under one temporary directory and is
removed at the end, also on Ctrl-C and on failure. Traffic goes only to
127.0.0.1. Takes well under a minute.`

// Pacing of the demo. The intervals are the agents' and coordinator's
// shortest sensible ones, so that what a step changes shows within seconds;
// a node is stale after three report intervals.
const (
	demoInterval = 2 * time.Second
	// demoRate paces the origin for the fetch watched in step 5: 128 MiB in
	// about four seconds, slow enough to see, quick enough to wait for.
	demoRate = 32 << 20
	// demoSlowRate is the origin's pace after step 5, so that the fetch
	// started then on the other fabric is still running when status and
	// place are shown.
	demoSlowRate = 2 << 20
	// demoWait bounds every wait for the coordinator to see a change.
	demoWait = 20 * time.Second
)

// devClusterConf is where scripts/dev-cluster keeps its slurm.conf; only a
// cluster whose slurm.conf says ClusterName=llmgw-dev is ever used, so the
// demo never writes features or submits jobs on a real cluster.
const devClusterConf = "/var/tmp/llmgw-dev-cluster/slurm.conf"

// Options are what `llmgw demo` was given.
type Options struct {
	Stdout   io.Writer
	Terminal bool                // Stdout is a terminal: progress bars
	Getenv   func(string) string // the environment (SLURM_CONF)
	Bin      string              // this llmgw binary, run as coordinator and agents
	Parent   string              // where the demo's temporary directory goes
	Version  string              // llmgw's version, in the client's User-Agent

	NoFUSE, NoCluster bool
}

// Run runs the demo: every step, then the cleanup, also after a failure or
// when ctx is cancelled (Ctrl-C).
func Run(ctx context.Context, o Options) error {
	d := &demoRun{getenv: o.Getenv, version: o.Version, out: o.Stdout, bin: o.Bin, noFUSE: o.NoFUSE, noCluster: o.NoCluster,
		t0: time.Now(), tty: o.Terminal, sums: map[string]string{}}
	var err error
	if d.dir, err = os.MkdirTemp(o.Parent, "llmgw-demo-"); err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	if d.dir, err = filepath.Abs(d.dir); err != nil {
		os.RemoveAll(d.dir)
		return err
	}
	err = d.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			err = errors.New("interrupted")
		} else {
			d.showLogs()
		}
	}
	cerr := d.cleanup()
	if err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		d.say("\nThe demo took %.1fs.", time.Since(d.t0).Seconds())
	}
	return err
}

// demoRun is one run of the demo: what it started, and where.
type demoRun struct {
	getenv  func(string) string
	version string
	out     io.Writer
	tty     bool
	bin     string
	dir     string // the temporary directory; everything lives under it
	t0      time.Time

	noFUSE, noCluster bool

	coordURL   string
	adminToken string
	client     *api.Client

	procs  []*demoProc
	agents map[string]*demoProc

	fuse    *demoProc // bindfs, when the filer is a FUSE mount
	filer   string    // where the nodes of ib-a see the filer
	origin  *Origin
	sums    map[string]string // model → sha256
	sources map[string]string // model → catalog source

	bgCancel context.CancelFunc // the fetch left running on n3
	bgDone   chan struct{}

	cluster *demoCluster // the dev cluster, when step 8 can use it
	skipWhy string       // why step 8 is skipped
}

// demoProc is one process the demo started.
type demoProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	// stopping is set when the demo stops the process on purpose; any
	// other exit is a failure the demo reports at once.
	stopping bool
}

// say prints a line with the temporary directory written as $DEMO, so that
// commands and paths stay readable.
func (d *demoRun) say(format string, args ...any) {
	fmt.Fprintln(d.out, d.short(fmt.Sprintf(format, args...)))
}

func (d *demoRun) short(s string) string {
	if d.dir == "" {
		return s
	}
	return strings.ReplaceAll(s, d.dir, "$DEMO")
}

// step starts step n with its title and the one line that says what it
// shows.
func (d *demoRun) step(n int, title, shows string) {
	d.say("\n[%d/8] %s", n, title)
	d.say("      what this shows: %s", shows)
}

// explain prints sentences as a list under a command's output.
func (d *demoRun) explain(lines []string) {
	for _, l := range lines {
		d.say("   - %s", l)
	}
}

func (d *demoRun) run(ctx context.Context) error {
	fmt.Fprintf(d.out, "llmgw demo: the whole flow on this machine. Paths below are under $DEMO=%s,\n", d.dir)
	d.say("which is removed at the end with every process and mount the demo starts.")
	d.findCluster(ctx)
	for _, s := range []func(context.Context) error{
		d.stepCoordinator, d.stepAgents, d.stepOrigin, d.stepModels,
		d.stepFetch, d.stepStatus, d.stepPlace, d.stepSbatch,
	} {
		if err := s(ctx); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// --- step 1 -----------------------------------------------------------------

func (d *demoRun) stepCoordinator(ctx context.Context) error {
	d.step(1, "The coordinator",
		"the service that keeps the catalog and every node's report, on a sqlite file, with an admin token; each node gets a token of its own in step 2.")
	dir := filepath.Join(d.dir, "coordinator")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d.adminToken = filepath.Join(dir, "admin.token")
	if err := writeToken(d.adminToken); err != nil {
		return err
	}
	conf := filepath.Join(dir, "coordinator.toml")
	text := fmt.Sprintf(`# llmgw demo: the coordinator
listen = "127.0.0.1:0"
db = %q
admin_token_file = %q
report_interval = %q
`, filepath.Join(dir, "coordinator.db"), d.adminToken, demoInterval)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return err
	}
	args := []string{"coordinator", "--config", conf}
	if d.cluster != nil {
		// Keep the dev cluster's node features in step with presence, so
		// that llmgw sbatch has a preference to add in step 8.
		args = append(args, "--features", "--feature-file", filepath.Join(dir, "features"), "--slurm-conf", d.cluster.conf)
	}
	d.say("$ cat %s", conf)
	d.indent(text)
	d.say("$ llmgw %s &", strings.Join(args, " "))
	p, err := d.start(ctx, "coordinator", filepath.Join(dir, "coordinator.log"), args...)
	if err != nil {
		return err
	}
	addr, err := d.waitLog(ctx, p, "coordinator serving", "listen")
	if err != nil {
		return err
	}
	d.coordURL = "http://" + addr
	tok, err := api.ReadToken(d.adminToken)
	if err != nil {
		return err
	}
	d.client = &api.Client{BaseURL: d.coordURL, Token: tok, UserAgent: "llmgw-demo/" + d.version}
	if err := d.waitFor(ctx, "the coordinator to answer", func() (bool, error) {
		return d.client.Do(ctx, http.MethodGet, "/readyz", nil, nil) == nil, nil
	}); err != nil {
		return err
	}
	d.say("   serving on %s (pid %d); the commands below find it through:", d.coordURL, p.cmd.Process.Pid)
	d.say("$ export LLMGW_COORDINATOR=%s LLMGW_TOKEN_FILE=%s", d.coordURL, d.adminToken)
	return nil
}

func writeToken(path string) error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600)
}

// --- step 2 -----------------------------------------------------------------

func (d *demoRun) stepAgents(ctx context.Context) error {
	d.step(2, "A shared filer and four nodes' agents",
		"each node's agent scans its weight directories, tells a shared filesystem from a local disk by statfs, and reports to the coordinator.")
	disk := filepath.Join(d.dir, "filer-disk")
	d.filer = filepath.Join(d.dir, "filer")
	for _, p := range []string{disk, d.filer} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	if err := d.mountFiler(ctx, disk); err != nil {
		return err
	}
	// Written to the filer's disk, read by the nodes through the mount.
	if d.fuse == nil {
		disk = d.filer
	}
	shared := filepath.Join(d.filer, Shared.File)
	sum, err := Generate(filepath.Join(disk, Shared.File), Shared)
	if err != nil {
		return err
	}
	d.sums[Shared.Model] = sum
	d.sources = map[string]string{Shared.Model: shared}

	var ib, other []string
	d.agents = map[string]*demoProc{}
	for _, n := range Nodes {
		nd := filepath.Join(d.dir, n.Name)
		models := filepath.Join(nd, "models")
		for _, sub := range []string{models, filepath.Join(nd, "cache")} {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				return err
			}
		}
		if n.Name == LocalHolder {
			local := filepath.Join(models, Local.File)
			sum, err := Generate(local, Local)
			if err != nil {
				return err
			}
			d.sums[Local.Model] = sum
			d.sources[Local.Model] = local
		}
		dirs := []string{models}
		if n.Filer {
			dirs = []string{d.filer, models}
			ib = append(ib, n.Name)
		} else {
			other = append(other, n.Name)
		}
		quoted := make([]string, len(dirs))
		for i, dd := range dirs {
			quoted[i] = strconv.Quote(dd)
		}
		// Each node reports with a token of its own, which speaks for it
		// alone, installed as a site installs a host key (without munge;
		// with it, no token at all).
		token := filepath.Join(nd, "node.token")
		tokenArgs := []string{"nodes", "token", n.Name, "--out", token}
		if n.Name == Nodes[0].Name {
			_, err = d.show(ctx, d.clientEnv(), tokenArgs...)
		} else {
			_, err = d.output(ctx, d.clientEnv(), tokenArgs...)
		}
		if err != nil {
			return err
		}
		conf := filepath.Join(nd, "agent.toml")
		text := fmt.Sprintf(`# llmgw demo: node %s
coordinator = %q
token_file = %q
node = %q
fabric = %q
weight_dirs = [%s]
cache_dir = %q
state_dir = %q
run_dir = %q
socket = %q
scan_interval = %q
report_interval = %q
`, n.Name, d.coordURL, token, n.Name, n.Fabric, strings.Join(quoted, ", "),
			filepath.Join(nd, "cache"), filepath.Join(nd, "state"), filepath.Join(nd, "run"),
			filepath.Join(nd, "agent.sock"), demoInterval, demoInterval)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return err
		}
		if n.Name == Nodes[0].Name {
			d.say("$ cat %s        # the others differ in names and paths", conf)
			d.indent(text)
		}
		d.say("$ llmgw agent --config %s &", conf)
		p, err := d.start(ctx, "agent "+n.Name, filepath.Join(nd, "agent.log"), "agent", "--config", conf)
		if err != nil {
			return err
		}
		d.agents[n.Name] = p
	}
	if err := d.waitFor(ctx, "all four agents to report", func() (bool, error) {
		st, err := d.client.Status(ctx)
		return err == nil && st.Nodes.OK == len(Nodes), nil
	}); err != nil {
		return err
	}
	d.say("   all %d agents have reported: %s in fabric ib-a, %s in ib-b.", len(Nodes), strings.Join(ib, ","), strings.Join(other, ","))

	// What the scanner makes of the filer and of a node's own disk, as
	// each agent sees it.
	scanArgs := []string{"scan", d.filer, filepath.Join(d.dir, LocalHolder, "models")}
	out, err := d.show(ctx, nil, scanArgs...)
	if err != nil {
		return err
	}
	filerShared := strings.Contains(out, Shared.File) && lineHas(out, Shared.File, "shared")
	switch {
	case d.fuse != nil && filerShared:
		d.explain([]string{
			"The filer is a real FUSE mount (bindfs over $DEMO/filer-disk), so statfs says FUSE and the scanner calls it shared, as it would NFS or Lustre.",
			LocalHolder + "'s models directory is on this machine's own disk: local.",
		})
	case d.fuse != nil:
		d.explain([]string{"The filer is a FUSE mount, yet the scanner did not call it shared: see the scan's notes above."})
	default:
		d.explain([]string{
			"Simulated shared (no FUSE here): the filer is a plain directory, so statfs reports this machine's disk and the scanner honestly calls it local. " +
				"On a real cluster, or here as root with /dev/fuse and bindfs, it shows as shared.",
			LocalHolder + "'s models directory is on this machine's own disk: local.",
		})
	}
	return nil
}

// lineHas reports whether a line of out contains both a and b.
func lineHas(out, a, b string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, a) && strings.Contains(l, b) {
			return true
		}
	}
	return false
}

// fuseMagic is FUSE_SUPER_MAGIC, what statfs reports for a FUSE mount.
const fuseMagic = 0x65735546

// mountFiler mounts disk on d.filer with bindfs, where the machine allows
// it; otherwise the filer stays a plain directory, and is said to be one.
func (d *demoRun) mountFiler(ctx context.Context, disk string) error {
	why := ""
	bindfs, lerr := exec.LookPath("bindfs")
	switch {
	case d.noFUSE:
		why = "--no-fuse was given"
	case os.Geteuid() != 0:
		why = "not root"
	case lerr != nil:
		why = "bindfs is not installed (apt-get install bindfs)"
	default:
		if _, err := os.Stat("/dev/fuse"); err != nil {
			why = "/dev/fuse is missing"
		}
	}
	if why == "" {
		// In the foreground (-f), so the mount is a child of the demo,
		// stopped with it, never a daemon left behind.
		if bindfs, lerr = filepath.Abs(bindfs); lerr == nil {
			d.say("$ bindfs -f %s %s &", disk, d.filer)
			p, err := d.start(ctx, "bindfs", filepath.Join(d.dir, "bindfs.log"), append([]string{bindfs}, "-f", disk, d.filer)...)
			if err != nil {
				return err
			}
			d.fuse = p
			err = d.waitFor(ctx, "the FUSE mount", func() (bool, error) {
				var st syscall.Statfs_t
				return syscall.Statfs(d.filer, &st) == nil && st.Type == fuseMagic, nil
			})
			if err == nil {
				d.say("   $DEMO/filer is a FUSE mount of $DEMO/filer-disk: fabric ib-a's shared filer.")
				return nil
			}
			if ctx.Err() != nil {
				return err
			}
			why = "the bindfs mount did not appear"
			d.stopFUSE()
		}
	}
	d.say("   Simulated shared (no FUSE here: %s): $DEMO/filer is a plain directory standing in for fabric ib-a's filer.", why)
	return nil
}

// --- step 3 -----------------------------------------------------------------

func (d *demoRun) stepOrigin(ctx context.Context) error {
	d.step(3, "A local origin",
		"a remote source (an http URL, as hf: would be) that no node holds yet; nodes fetch it into their cache on demand.")
	dir := filepath.Join(d.dir, "origin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	sum, err := Generate(filepath.Join(dir, Remote.File), Remote)
	if err != nil {
		return err
	}
	d.sums[Remote.Model] = sum
	if d.origin, err = NewOrigin(dir, demoRate); err != nil {
		return fmt.Errorf("origin: %w", err)
	}
	d.sources[Remote.Model] = d.origin.URL(Remote.File)
	d.say("   %s: %s generated from a seeded PRNG, sha256 %s…", d.sources[Remote.Model], catalog.FormatBytes(Remote.Size), sum[:16])
	d.say("   served on 127.0.0.1 with ranges, paced to %s/s over all connections so a fetch can be watched.", catalog.FormatBytes(demoRate))
	return ctx.Err()
}

// --- step 4 -----------------------------------------------------------------

func (d *demoRun) stepModels(ctx context.Context) error {
	d.step(4, "The catalog",
		"models are registered by name with a source, size and sha256; the coordinator matches every node's report against them.")
	for _, w := range []Weight{Shared, Local, Remote} {
		if _, err := d.show(ctx, d.clientEnv(), "models", "add", w.Model, d.sources[w.Model],
			"--size", strconv.FormatInt(w.Size, 10), "--sha256", d.sums[w.Model]); err != nil {
			return err
		}
	}
	if _, err := d.show(ctx, d.clientEnv(), "models", "list"); err != nil {
		return err
	}
	d.explain([]string{
		Shared.Model + " is a path on the filer, " + Local.Model + " a path on " + LocalHolder + "'s own disk: paths are checked, never fetched.",
		Remote.Model + " is a URL: a node that needs it fetches it into its cache.",
	})
	// The agents' reports already list the files; the catalog change
	// rematches them at once, and the next report confirms it.
	return d.waitFor(ctx, "the coordinator to match the reports to the catalog", func() (bool, error) {
		st, err := d.client.Status(ctx)
		if err != nil {
			return false, nil
		}
		return serveOf(st, Shared.Model, "ib-a") != "" && serveOf(st, Shared.Model, "ib-a") != api.HoldNone &&
			serveOf(st, Local.Model, "ib-b") == api.HoldLocal, nil
	})
}

// serveOf is how fabric serves model in st, "" when st does not say.
func serveOf(st *api.Status, model, fabric string) string {
	for _, m := range st.Models {
		if m.Model.Name != model {
			continue
		}
		for _, p := range m.Fabrics {
			if p.Fabric == fabric {
				return p.Serve
			}
		}
	}
	return ""
}

// --- step 5 -----------------------------------------------------------------

func (d *demoRun) stepFetch(ctx context.Context) error {
	d.step(5, "A fetch through a node's agent",
		"what a job's Prolog does on a node without the weights: ask the local agent to ensure the source; the agent fetches it once for the node, checks the sha256, and reports it.")
	n1 := Nodes[0].Name
	sock := filepath.Join(d.dir, n1, "agent.sock")
	src := d.sources[Remote.Model]
	d.say("$ curl --unix-socket %s -d '{\"source\":\"%s\",\"sha256\":\"%s…\"}' http://agent/v1/ensure", sock, src, d.sums[Remote.Model][:8])
	lc := &api.LocalClient{Socket: sock}
	var last time.Time
	start := time.Now()
	drawn := false
	path, err := lc.Ensure(ctx, api.EnsureRequest{Source: src, SHA256: d.sums[Remote.Model], Size: Remote.Size}, func(f api.Fetch) {
		if time.Since(last) < 500*time.Millisecond && f.Done != f.Total {
			return
		}
		last = time.Now()
		line := progressLine(n1, f)
		if d.tty {
			fmt.Fprintf(d.out, "\r%s\033[K", line)
			drawn = true
			return
		}
		d.say("%s", line)
	})
	if drawn {
		fmt.Fprintln(d.out)
	}
	if err != nil {
		return fmt.Errorf("ensure %s on %s: %w", src, n1, err)
	}
	d.say("   done in %.1fs: %s", time.Since(start).Seconds(), path)
	d.explain([]string{
		"The file is in " + n1 + "'s cache under a name derived from the source; the sha256 was checked before it got that name.",
		"Every job on " + n1 + " asking for it meanwhile would have shared this one fetch.",
	})
	if err := d.waitFor(ctx, "the coordinator to hear that "+n1+" holds "+Remote.Model, func() (bool, error) {
		st, err := d.client.Status(ctx)
		return err == nil && serveOf(st, Remote.Model, Nodes[0].Fabric) == api.HoldLocal, nil
	}); err != nil {
		return err
	}

	// Two things for status to show in step 6: a fetch under way on the
	// other fabric, and a node that stopped reporting.
	n3, n4 := Nodes[2].Name, Nodes[3].Name
	d.origin.SetRate(demoSlowRate)
	d.say("   Meanwhile a job lands on %s (fabric %s) and its Prolog asks for %s too; the origin is slowed to %s/s so this fetch is still running in the next steps.",
		n3, Nodes[2].Fabric, Remote.Model, catalog.FormatBytes(demoSlowRate))
	bg, cancel := context.WithCancel(ctx)
	d.bgCancel, d.bgDone = cancel, make(chan struct{})
	go func() {
		defer close(d.bgDone)
		lc := &api.LocalClient{Socket: filepath.Join(d.dir, n3, "agent.sock")}
		lc.Ensure(bg, api.EnsureRequest{Source: src, SHA256: d.sums[Remote.Model], Size: Remote.Size}, nil)
	}()
	d.say("   And %s's agent is stopped (SIGTERM), as if the node had gone down.", n4)
	d.stop(d.agents[n4])
	return d.waitFor(ctx, n3+"'s fetch to show and "+n4+" to go stale", func() (bool, error) {
		st, err := d.client.Status(ctx)
		if err != nil {
			return false, nil
		}
		fetching := false
		for _, m := range st.Models {
			for _, p := range m.Fabrics {
				for _, f := range p.Fetching {
					fetching = fetching || (f.Node == n3 && f.Done > 0)
				}
			}
		}
		return fetching && st.Nodes.Stale == 1, nil
	})
}

func progressLine(node string, f api.Fetch) string {
	const width = 30
	pct := -1
	if f.Total > 0 {
		pct = int(f.Done * 100 / f.Total)
	}
	bar := strings.Repeat("?", width)
	if pct >= 0 {
		n := min(width*pct/100, width)
		bar = strings.Repeat("=", n) + strings.Repeat(" ", width-n)
	}
	amount := catalog.FormatBytes(f.Done)
	if f.Total >= 0 {
		amount += " of " + catalog.FormatBytes(f.Total)
	}
	line := fmt.Sprintf("   %s [%s] %3d%%  %s", node, bar, max(pct, 0), amount)
	if f.Rate > 0 {
		line += "  " + catalog.FormatBytes(int64(f.Rate)) + "/s"
	}
	return line
}

// --- step 6 -----------------------------------------------------------------

func (d *demoRun) stepStatus(ctx context.Context) error {
	d.step(6, "llmgw status",
		"per fabric, whether each model can be served without a fetch, and how: shared filer, local copies, or nowhere; fetches under way; stale nodes.")
	env := d.clientEnv()
	if _, err := d.show(ctx, env, "status"); err != nil {
		return err
	}
	var st api.Status
	if err := d.jsonOf(ctx, env, &st, "status", "--json"); err != nil {
		return err
	}
	d.say("   Line by line:")
	d.explain(ExplainStatus(&st))
	if d.fuse == nil {
		d.say("   (Simulated shared, no FUSE here: the filer is a plain directory, so %s shows as local copies on the nodes that see it; on a real filer the line reads \"filer (2 nodes)\".)", Shared.Model)
	}
	d.say("")
	if _, err := d.show(ctx, env, "status", Remote.Model); err != nil {
		return err
	}
	var mn api.ModelNodes
	if err := d.jsonOf(ctx, env, &mn, "status", Remote.Model, "--json"); err != nil {
		return err
	}
	d.say("   Node by node:")
	d.explain(ExplainModelNodes(&mn))
	return nil
}

// --- step 7 -----------------------------------------------------------------

func (d *demoRun) stepPlace(ctx context.Context) error {
	d.step(7, "llmgw place",
		"how a job wanting a model would be placed: every node ranked, with the reason for its rank.")
	env := d.clientEnv()
	for _, q := range [][]string{
		{"place", "--model", Remote.Model},
		{"place", "--model", Shared.Model, "-N", "2"},
	} {
		if _, err := d.show(ctx, env, q...); err != nil {
			return err
		}
		var p api.Placement
		if err := d.jsonOf(ctx, env, &p, append(q, "--json")...); err != nil {
			return err
		}
		d.explain(ExplainPlacement(&p))
		d.say("")
	}
	return nil
}

// --- step 8 -----------------------------------------------------------------
