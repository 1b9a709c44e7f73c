// Package agent is llmgw's node daemon. It scans the weight directories it
// is told about and its fetch cache, reports what the node holds to the
// coordinator, keeps a node-local copy of the catalog, and serves the Slurm
// hooks on a unix socket: ensure(source) makes weights present with one
// fetch per source for the whole node, however many jobs wait for it.
//
// The agent observes storage; it does not manage it. A node with no weight
// directories configured reports no weights and ranks exactly like a node
// that looked and found nothing, so enabling the feature on one node never
// pushes jobs off the others. And the agent never stops serving its node
// because the coordinator is away: reports back off and resume, the hooks
// keep their socket, and the catalog copy keeps resolving model names.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
	"github.com/llmgw/llmgw/weights/scan"
)

// Agent is one node's daemon. Create it with New; Run serves until its
// context ends, Once scans and reports a single time.
type Agent struct {
	log     logrus.FieldLogger
	started time.Time
	metrics *metrics
	http    *http.Client

	// Knobs tests turn; New sets the production values.
	debounce       time.Duration
	peerRetry      time.Duration // how often a taken peer port is tried again
	backoffBase    time.Duration
	backoffCap     time.Duration
	notifySocket   string                 // $NOTIFY_SOCKET
	configureFetch func(f *fetch.Fetcher) // applied to every Fetcher made

	kickc chan kick // wakes the loops; see kick

	mu      sync.Mutex
	cfg     Config  // in force
	pending *Config // from Reload, applied before the next scan
	fetcher *fetch.Fetcher
	flights map[string]*flight
	inv     scan.Inventory
	invFP   string
	scanned time.Time
	scanDur time.Duration
	errs    errorRing
	seq     int64
	last    *api.Report
	result  api.ReportResult
	catalog api.CatalogStatus
	// failing is the class of the current run of report failures ("" when
	// the last report got through), so each change is logged once.
	failing     string
	failures    int
	catalogFail string
	dirState    map[string]string // path → "", "missing" or the scan error
	swarm       swarmState
	seeding     map[string]bool // sources a seed ask is ensuring
	prefetch    *prefetcher     // issue 28: prefetch.go
	starts      *startWatch     // issue 28: starts.go
	gpu         gpuProbe
	evict       evictState // evict.go; its own lock
	scanMem     scan.Memory
	hubs        string // the catalog's Hub models, as hubsOf says them
	// catTag is the tag of the report answer the catalog copy was last
	// read after (api.ReportAnswer.CatalogTag), catFrom the coordinator
	// it came from, and catFiles the copy's two files as written then:
	// while the answers carry the same tag and the files are those, the
	// copy is the catalog, and is not read again.
	catTag, catFrom string
	catFiles        []os.FileInfo
	// hfRoom is the Hugging Face cache's room as the last scan measured
	// it, nil when it is on the cache's own filesystem or did not answer.
	hfRoom *api.Cache
}

// kick is a request to one of the agent's loops.
type kick int

const (
	kickReport kick = iota // report soon (debounced)
	kickScan               // scan now, then report soon
)

// New checks cfg, fills in its defaults and returns an agent ready to Run.
// It does not touch the network or the socket.
func New(cfg Config, log logrus.FieldLogger) (*Agent, error) {
	cfg, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 15 * time.Second}
	if cfg.TLSCA != "" {
		t, err := api.TLSTransport(cfg.TLSCA)
		if err != nil {
			return nil, err
		}
		hc.Transport = t
	}
	if log == nil {
		l := logrus.New()
		l.SetOutput(os.Stderr)
		l.SetFormatter(&logrus.JSONFormatter{})
		log = l
	}
	a := &Agent{
		log:     log,
		started: time.Now().UTC(),
		// Reporting and scanning share one loop; a coordinator that accepts
		// connections and never answers must not hold scans up for long.
		http:         hc,
		debounce:     time.Second,
		peerRetry:    defaultPeerRetry,
		backoffBase:  backoffBase,
		backoffCap:   backoffCap,
		notifySocket: os.Getenv("NOTIFY_SOCKET"),
		kickc:        make(chan kick, 16),
		cfg:          cfg,
		flights:      map[string]*flight{},
		seeding:      map[string]bool{},
	}
	a.prefetch = newPrefetcher(a)
	a.prefetch.room = a.Room
	a.starts = newStartWatch(a)
	a.swarm.calls = map[swarmCallKey]*swarmCall{}
	a.swarm.said = map[string]bool{}
	a.swarm.origin = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, DisableCompression: true, ResponseHeaderTimeout: 30 * time.Second}}
	a.swarm.peer = peerClient()
	if a.swarm.addr, err = resolvePeerAddr(cfg); err != nil {
		return nil, err
	}
	a.catalog.Path = cfg.CatalogCopyPath()
	a.metrics = newMetrics(cfg.Version, func() float64 { return float64(len(a.fetchesNow(time.Now()))) })
	a.metrics.reg.MustRegister(prefetchCollector{a.prefetch})
	if cp, err := catalog.ReadCopy(a.catalog.Path); err == nil {
		a.noteGCHeldLocked(cp)
	}
	if cfg.Coordinator != "" && cfg.TokenFile == "" && cfg.MungeSocket == "" {
		log.Warn("no token file and no munge_socket configured: reports are sent without a token, which the coordinator refuses; install this node's own token ('llmgw nodes token NODE --out FILE') as token_file, or set munge_socket")
	}
	return a, nil
}

// Config returns the configuration in force, defaults filled in.
func (a *Agent) Config() Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.cfg
	c.WeightDirs = slices.Clone(c.WeightDirs)
	return c
}

// Reload replaces the configuration. It is checked now and applied before
// the next scan, so a scan or a report never sees half of one config and
// half of another. The socket, state directory and metrics address are
// bound at start; a change to them is logged and waits for a restart.
func (a *Agent) Reload(cfg Config) error {
	cfg, err := resolve(cfg)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.pending = &cfg
	a.mu.Unlock()
	a.kick(kickScan)
	return nil
}

// applyPending installs a configuration given to Reload.
func (a *Agent) applyPending() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		return
	}
	old, nc := a.cfg, *a.pending
	a.pending = nil
	for name, pair := range map[string][2]string{
		"socket": {old.Socket, nc.Socket}, "state_dir": {old.StateDir, nc.StateDir}, "metrics_listen": {old.MetricsListen, nc.MetricsListen},
	} {
		if pair[0] != pair[1] {
			a.log.WithField("setting", name).Warnf("%s changed from %q to %q; it takes effect when the agent restarts", name, pair[0], pair[1])
		}
	}
	nc.Socket, nc.StateDir, nc.MetricsListen = old.Socket, old.StateDir, old.MetricsListen
	if nc.CacheDir != old.CacheDir || nc.Connections != old.Connections || nc.LockDir() != old.LockDir() ||
		nc.HFTokenFile != old.HFTokenFile || nc.CacheReserve != old.CacheReserve || nc.FetchMinSpeed != old.FetchMinSpeed || nc.HFEndpoint != old.HFEndpoint {
		// A Fetcher's fields must not change under a running Ensure; fetches
		// under way finish on the old one, new ones use the new one. The
		// node-wide lock directory keeps the two from fetching one file twice.
		a.fetcher = nil
	}
	a.cfg = nc
	a.log.WithField("node", nc.Node).Info("configuration reloaded")
}

// fetcherLocked returns the Fetcher for the current config. a.mu is held.
func (a *Agent) fetcherLocked() *fetch.Fetcher {
	if a.fetcher == nil {
		f := &fetch.Fetcher{
			CacheDir:     a.cfg.CacheDir,
			LockDir:      a.cfg.LockDir(),
			Connections:  a.cfg.Connections,
			HFTokenFile:  a.cfg.HFTokenFile,
			HFEndpoint:   a.cfg.HFEndpoint,
			CacheReserve: a.cfg.CacheReserve,
			MinSpeed:     a.cfg.FetchMinSpeed,
			MakeRoom:     a.makeRoom,
			PrefetchRoom: a.prefetchRoom,
			OnProgress:   a.onProgress,
			Log:          a.log.WithField("part", "fetch"),
		}
		if a.configureFetch != nil {
			a.configureFetch(f)
		}
		a.fetcher = f
	}
	return a.fetcher
}

// kick asks the loops for a scan or a report without blocking: requests
// that arrive while one is pending are the same request.
func (a *Agent) kick(k kick) {
	select {
	case a.kickc <- k:
	default:
	}
}

// recordError keeps msg among the recent errors the next report carries.
func (a *Agent) recordError(msg string) {
	a.mu.Lock()
	a.errs.add(time.Now(), msg)
	a.mu.Unlock()
}

// scanDirs is what a scan covers: the configured weight directories, then
// the cache, where what the agent fetched lives, then the Hugging Face
// cache Hub models are fetched into, unless a directory already scanned is
// it or holds it at its top (its default, "hub" in the cache): a snapshot
// there is held, whoever downloaded it.
func scanDirs(cfg Config) []string {
	dirs := slices.Clone(cfg.WeightDirs)
	if !slices.Contains(dirs, cfg.CacheDir) {
		dirs = append(dirs, cfg.CacheDir)
	}
	hf := cfg.HFCacheDir()
	if !slices.ContainsFunc(dirs, func(d string) bool { return d == hf || filepath.Dir(hf) == filepath.Clean(d) }) {
		dirs = append(dirs, hf)
	}
	return dirs
}

// hubLists are the file lists of the Hub models in the node's catalog
// copy, which the scan judges their snapshots by (scan.Options.Hub). A
// copy that cannot be read gives none: snapshots are then held to the
// rules for a snapshot without a list.
func hubLists(cfg Config) map[string]catalog.Hub {
	cp, err := catalog.ReadCopy(cfg.CatalogCopyPath())
	if err != nil {
		return nil
	}
	return scan.HubLists(cp.Models)
}

// scan scans once and reports whether the inventory changed.
func (a *Agent) scan(ctx context.Context) bool {
	cfg := a.Config()
	start := time.Now()
	// The memory carries sizes from scan to scan: a touch of a weight
	// file does not make its model vanish for a scan interval.
	inv := scan.Scan(ctx, scanDirs(cfg), scan.Options{DirTimeout: cfg.DirTimeout, Hub: hubLists(cfg), Memory: &a.scanMem})
	hfRoom := hfCacheRoom(cfg)
	took := time.Since(start)
	fp := fingerprint(inv)

	counts := map[[2]string]int{}
	for _, w := range inv.Weights {
		kind := "local"
		if w.Shared {
			kind = "shared"
		}
		counts[[2]string{kind, fmt.Sprint(w.Complete)}]++
	}
	for _, kind := range []string{"shared", "local"} {
		for _, c := range []string{"true", "false"} {
			a.metrics.weights.WithLabelValues(kind, c).Set(float64(counts[[2]string{kind, c}]))
		}
	}
	a.metrics.scanDuration.Observe(took.Seconds())
	a.metrics.lastScanSuccess.SetToCurrentTime()

	a.mu.Lock()
	changed := fp != a.invFP
	a.inv, a.invFP, a.scanned, a.scanDur = inv, fp, time.Now().UTC(), took
	a.hfRoom = hfRoom
	a.mu.Unlock()
	// The files the chunk server offers are checked as often as the cache
	// is scanned: one removed by gc (an Epilog's, in another process) or
	// replaced leaves its swarm now, not when a peer next asks for it.
	for sum, h := range a.swarm.files.sweep() {
		go a.withdraw(sum, h)
	}
	a.logDirChanges(inv.Dirs)
	a.log.WithFields(logrus.Fields{"weights": len(inv.Weights), "took": took.String(), "changed": changed}).Debug("scanned")
	return changed
}

// logDirChanges logs a directory that became unreadable, missing, or
// fine again — once per change, not once per scan: a mount that is gone
// overnight is one line, and the report carries its state every time.
func (a *Agent) logDirChanges(dirs []scan.Dir) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := map[string]string{}
	for _, d := range dirs {
		state := d.Err
		if d.Missing && state == "" {
			state = "missing"
		}
		now[d.Path] = state
		if state == a.dirState[d.Path] {
			continue
		}
		log := a.log.WithField("dir", d.Path)
		switch {
		case d.Err != "":
			log.Warn("directory not scanned: " + d.Err)
			a.errs.add(time.Now(), "scan "+d.Path+": "+d.Err)
		case d.Missing:
			// Not an error: a mount that has not come back yet looks like
			// this, and the node simply holds nothing there until it does.
			log.Info("directory does not exist (yet); it holds nothing until it does")
		case a.dirState[d.Path] == "missing":
			log.Info("directory exists now")
		case a.dirState[d.Path] != "":
			log.Info("directory scanned again")
		}
	}
	a.dirState = now
}

// buildReport makes the next report from the last scan.
func (a *Agent) buildReport() *api.Report {
	now := time.Now().UTC()
	cfg := a.Config()
	cache, cerr := cacheRoom(cfg.CacheDir)
	if cerr != nil {
		a.recordError(cerr.Error())
	}
	fetches := a.fetchesNow(now)
	gpu := a.gpuMemory(cfg)
	pfStates, pfBytes := a.prefetch.states()
	starts := a.starts.pending()

	a.mu.Lock()
	defer a.mu.Unlock()
	r := reportOf(a.inv, len(cfg.WeightDirs) > 0)
	a.seq++
	r.ID = uuid.NewString()
	r.Seq = a.seq
	r.Started = a.started
	r.Time = now
	r.Node = cfg.Node
	r.Fabric = cfg.Fabric
	r.Cache = cache
	if a.hubs != "" && a.hfRoom != nil {
		hf := *a.hfRoom
		r.HFCache = &hf
	}
	r.GPUMemory = gpu
	r.Fetches = fetches
	r.Errors = a.errs.strings(now)
	r.AgentVersion = cfg.Version
	if a.swarm.serving.Load() {
		// Only while it serves there: a port another process holds is
		// no address for the fabric's members to be sent to.
		r.PeerAddr = a.swarm.addr
	}
	r.GCHeld, r.GCHeldSince = a.catalog.GCHeld, a.catalog.GCHeldSince
	r.Prefetches, r.PrefetchBytes = pfStates, pfBytes
	r.Starts = starts
	a.last = &r
	return &r
}

// reportsWithMunge says whether reports carry a MUNGE credential rather
// than the token (client).
func reportsWithMunge(cfg Config) bool {
	if cfg.MungeSocket == "" {
		return false
	}
	_, err := os.Stat(cfg.TokenFile)
	return cfg.TokenFile == "" || errors.Is(err, os.ErrNotExist)
}

// client returns a coordinator client with the current token, or why there
// is none. The token file is read each time so a rotated token is picked up
// without a restart.
//
// With munge_socket and a token file that exists, the token speaks to the
// coordinator and MUNGE to peers: a node's token is its own secret, where
// root on any host with the munge key can make a credential from any
// node's address, and a coordinator with node_tokens_required takes
// reports with the token only. A token file that does not exist leaves
// MUNGE (the packaged agent.toml names one).
func (a *Agent) client(cfg Config) (*api.Client, error) {
	c := &api.Client{BaseURL: cfg.Coordinator, HTTP: a.http, UserAgent: "llmgw-agent/" + cfg.Version}
	if cfg.TokenFile != "" {
		tok, err := api.ReadToken(cfg.TokenFile)
		switch {
		case err == nil:
			c.Token = tok
			return c, nil
		case cfg.MungeSocket == "" || !errors.Is(err, os.ErrNotExist):
			return nil, err
		}
	}
	if cfg.MungeSocket != "" {
		c.Auth = munge.Authenticator{Codec: munge.New(cfg.MungeSocket)}
	}
	return c, nil
}

// report builds a report and sends it. It returns the report and, when
// the coordinator did not take it, why, with the failure's class.
func (a *Agent) report(ctx context.Context) (*api.Report, string, error) {
	cfg := a.Config()
	r := a.buildReport()
	if cfg.Coordinator == "" {
		return r, "", nil
	}
	c, err := a.client(cfg)
	result := resultNoToken
	var ans api.ReportAnswer
	if err == nil {
		ans, err = c.PostReport(ctx, r)
		result = classify(err)
	}
	a.metrics.reports.WithLabelValues(result).Inc()
	now := time.Now().UTC()

	a.mu.Lock()
	a.result.Time, a.result.Seq, a.result.OK = now, r.Seq, err == nil
	a.result.Error = errString(err)
	prev, fails := a.failing, a.failures
	if err == nil {
		a.result.LastOK = now
		a.failing, a.failures = "", 0
	} else {
		a.failing = result
		a.failures++
		a.errs.add(now, "report: "+err.Error())
	}
	a.mu.Unlock()

	log := a.log.WithFields(logrus.Fields{"seq": r.Seq, "coordinator": cfg.Coordinator})
	switch {
	case err == nil && prev != "":
		log.WithField("failed_attempts", fails).Info("coordinator takes reports again")
	case err == nil:
		log.WithField("weights", len(r.Weights)).Debug("reported")
	case result != prev:
		// Logged once per kind of failure, not once per retry: a coordinator
		// down overnight is one line, and the metric counts the attempts.
		log.WithError(err).WithField("result", result).Warn("report not delivered; " + skippedWhat(result, reportsWithMunge(cfg)) + "; retrying with backoff, still serving this node")
	default:
		log.WithError(err).WithField("result", result).Debug("report not delivered")
	}
	if err == nil {
		a.metrics.lastReportSuccess.SetToCurrentTime()
		if a.catalogCurrent(cfg, ans.CatalogTag) {
			a.catalogConfirmed()
		} else if cp, cerr := refreshCatalog(ctx, c, cfg); cerr != nil {
			a.catalogFailed(cerr)
		} else if a.catalogOK(cp, cfg, ans.CatalogTag) {
			// The scan judges Hub snapshots by the catalog's lists: a
			// model added or repinned is seen held without waiting a
			// scan interval.
			a.kick(kickScan)
		}
		// After the catalog refresh, so the node judges the request by
		// the catalog as it is now.
		if ans.GC != nil {
			a.answerGC(ctx, c, cfg, *ans.GC)
		}
		if len(ans.Seed) > 0 {
			a.seed(ctx, ans.Seed)
		}
		if ans.Prefetch != nil {
			a.prefetch.set(ans.Prefetch, now)
		}
		a.starts.delivered(r.Starts)
	}
	return r, result, err
}

// catalogCurrent reports whether the node's catalog copy is the catalog
// the coordinator named in its answer to a report (tag): the copy was read
// after an answer with the same tag, from the same coordinator, and is
// still on disk. Then it need not be read again: every node reading the
// whole catalog after every report is, for a catalog of Hub models with
// their file lists, tens of megabytes a second at ten thousand nodes. A
// coordinator older than tags answers none, and the catalog is read each
// time, as it always was.
func (a *Agent) catalogCurrent(cfg Config, tag string) bool {
	a.mu.Lock()
	same := tag != "" && tag == a.catTag && cfg.Coordinator == a.catFrom && a.catalog.Error == ""
	files := a.catFiles
	a.mu.Unlock()
	if !same {
		return false
	}
	// The files must be the ones written then: a state directory wiped
	// leaves the hooks nothing to resolve with, and a Prolog that read
	// the catalog itself may have replaced the copy with what it read,
	// which a slow answer can make older than this one.
	now := copyFiles(cfg)
	if len(now) != len(files) {
		return false
	}
	for i := range now {
		if !os.SameFile(now[i], files[i]) || !now[i].ModTime().Equal(files[i].ModTime()) {
			return false
		}
	}
	return true
}

// copyFiles are the catalog copy's two files as they are now, or nil when
// one is missing. The copy is written by a rename of a new file, so a
// rewritten copy is another file.
func copyFiles(cfg Config) []os.FileInfo {
	var out []os.FileInfo
	for _, p := range []string{cfg.CatalogCopyPath(), catalog.PrivateCopyPath(cfg.CatalogCopyPath())} {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		out = append(out, st)
	}
	return out
}

// catalogConfirmed records that the coordinator confirmed the copy is
// the catalog, without it being read again.
func (a *Agent) catalogConfirmed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.catalog.Checked = time.Now().UTC()
}

// catalogOK records a catalog copy just read from cfg's coordinator, after
// a report answer naming the catalog tag, and reports whether its Hub
// models changed since the last one.
func (a *Agent) catalogOK(cp catalog.Copy, cfg Config, tag string) bool {
	a.metrics.catalogReads.Inc()
	files, from := copyFiles(cfg), cfg.Coordinator
	a.mu.Lock()
	defer a.mu.Unlock()
	a.catalog.Fetched, a.catalog.Models, a.catalog.Error = cp.Fetched, len(cp.Models), ""
	a.catalog.Checked = cp.Fetched
	a.catTag, a.catFrom, a.catFiles = tag, from, files
	a.noteGCHeldLocked(cp)
	if a.catalogFail != "" {
		a.log.Info("catalog copy up to date again")
	}
	a.catalogFail = ""
	hubs := hubsOf(cp.Models)
	changed := hubs != a.hubs
	a.hubs = hubs
	return changed
}

// hubsOf names the Hub models of a catalog and their commits, to tell
// when they change.
func hubsOf(models []catalog.Model) string {
	var b strings.Builder
	for _, m := range models {
		if m.IsHub() {
			fmt.Fprintf(&b, "%s %s@%s %d\n", m.Name, m.Hub.Repo, m.Hub.Commit, len(m.Hub.Files))
		}
	}
	return b.String()
}

// noteGCHeldLocked keeps whether the catalog copy cp holds this node's
// gc, for the report, the socket's status and the metric; a change is
// logged once. a.mu is held.
func (a *Agent) noteGCHeldLocked(cp catalog.Copy) {
	why := cp.Distrust()
	if why != a.catalog.GCHeld {
		if why != "" {
			a.log.WithField("since", cp.DistrustSince).Warn("gc held: " + why + "; 'llmgw gc --trust' adopts the current catalog")
		} else if a.catalog.GCHeld != "" {
			a.log.Info("gc no longer held: this node trusts the catalog again")
		}
	}
	a.catalog.GCHeld, a.catalog.GCHeldSince = why, cp.DistrustSince
	if why != "" {
		a.metrics.gcHeld.Set(1)
	} else {
		a.metrics.gcHeld.Set(0)
	}
}

func (a *Agent) catalogFailed(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.catalog.Error = err.Error()
	a.errs.add(time.Now(), err.Error())
	if class := classify(err); class != a.catalogFail {
		a.log.WithError(err).Warn("catalog not refreshed; the hooks keep using the last copy")
		a.catalogFail = class
	}
}

// Once scans, builds one report and, when a coordinator is configured,
// sends it. sent says whether the coordinator took it; err says why not.
// The report is returned either way.
func (a *Agent) Once(ctx context.Context) (r *api.Report, sent bool, err error) {
	a.scan(ctx)
	r, _, err = a.report(ctx)
	return r, err == nil && a.Config().Coordinator != "", err
}

// WhyNotSent says what a report's failure (Once's err) means in practice
// and what to check, as the running agent logs it: `llmgw agent --once` is
// how an admin checks a node's setup, and "401" alone says nothing.
func (a *Agent) WhyNotSent(err error) string {
	return skippedWhat(classify(err), reportsWithMunge(a.Config()))
}

// Status is what the agent knows, as the socket's GET /v1/status answers.
func (a *Agent) Status() api.AgentStatus {
	cfg := a.Config()
	a.mu.Lock()
	defer a.mu.Unlock()
	st := api.AgentStatus{
		Node: cfg.Node, Fabric: cfg.Fabric, AgentVersion: cfg.Version, Started: a.started,
		Coordinator: cfg.Coordinator, WeightDirs: cfg.WeightDirs, CacheDir: cfg.CacheDir,
		LastScan: a.scanned, ScanTook: a.scanDur, Report: a.last, LastReport: a.result, Catalog: a.catalog,
		PeerAddr: a.swarm.addr, PeerServerError: a.swarm.notServing,
	}
	if a.last != nil {
		st.Prefetches = a.last.Prefetches
	}
	if st.WeightDirs == nil {
		st.WeightDirs = []string{}
	}
	return st
}

// Run serves until ctx ends: it binds the socket (and the metrics address),
// scans, tells systemd it is ready, then scans and reports on its intervals
// and whenever something changes. It returns nil on a clean stop; an error
// only when it cannot start.
func (a *Agent) Run(ctx context.Context) error {
	cfg := a.Config()
	l, err := listenSocket(cfg.Socket)
	if err != nil {
		return err
	}
	var ml net.Listener
	if cfg.MetricsListen != "" {
		if ml, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			l.Close()
			os.Remove(cfg.Socket)
			return fmt.Errorf("metrics listen %s: %w", cfg.MetricsListen, err)
		}
	}
	if cp, err := catalog.ReadCopy(a.catalog.Path); err == nil {
		a.mu.Lock()
		a.catalog.Fetched, a.catalog.Models = cp.Fetched, len(cp.Models)
		a.hubs = hubsOf(cp.Models)
		a.mu.Unlock()
	}
	a.log.WithFields(logrus.Fields{
		"node": cfg.Node, "fabric": cfg.Fabric, "weight_dirs": cfg.WeightDirs, "cache_dir": cfg.CacheDir,
		"socket": cfg.Socket, "coordinator": cfg.Coordinator, "version": cfg.Version,
	}).Info("agent starting")

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Go(func() {
		if err := a.serveSocket(ctx, l, cfg.Socket); err != nil && ctx.Err() == nil {
			errc <- err
			cancel()
		}
	})
	if ml != nil {
		srv := &http.Server{
			Handler:           promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{Registry: a.metrics.reg}),
			ReadHeaderTimeout: 10 * time.Second,
		}
		wg.Go(func() { srv.Serve(ml) })
		wg.Go(func() {
			<-ctx.Done()
			sctx, c := context.WithTimeout(context.Background(), time.Second)
			defer c()
			srv.Shutdown(sctx)
		})
		a.log.WithField("addr", ml.Addr().String()).Info("serving metrics at /metrics")
	}

	a.startPeerServer(ctx, cfg, &wg)

	wg.Go(func() { a.prefetch.run(ctx) })
	wg.Go(func() { a.starts.run(ctx, cfg.RunDir) })
	a.scan(ctx)
	if sent, err := sdNotify(a.notifySocket, "READY=1"); err != nil {
		a.log.WithError(err).Warn("could not tell systemd the agent is ready")
	} else if sent {
		a.log.Debug("told systemd the agent is ready")
	}

	a.loop(ctx)
	cancel()
	wg.Wait()
	if _, err := sdNotify(a.notifySocket, "STOPPING=1"); err != nil {
		a.log.WithError(err).Debug("sd_notify STOPPING")
	}
	select {
	case err := <-errc:
		return err
	default:
	}
	a.log.Info("agent stopped")
	return nil
}

// loop is the agent's clock: scans every ScanInterval, reports every
// ReportInterval ±10%, and sooner when a scan found a change or a fetch
// ended (after debounce, so a burst of changes is one report). While the
// coordinator refuses or cannot be reached, reports back off exponentially
// with jitter; nothing else waits for them.
func (a *Agent) loop(ctx context.Context) {
	cfg := a.Config()
	scanT := time.NewTimer(cfg.ScanInterval)
	defer scanT.Stop()
	reportAt := time.Now() // the first report goes out at once
	reportT := time.NewTimer(0)
	defer reportT.Stop()
	soon := func() {
		a.mu.Lock()
		failing := a.failures > 0
		a.mu.Unlock()
		// During backoff a change waits for the next attempt, which carries
		// it anyway: a change is no reason to hammer a coordinator that is down.
		if t := time.Now().Add(a.debounce); !failing && t.Before(reportAt) {
			reportAt = t
			reportT.Reset(a.debounce)
		}
	}
	rescan := func() {
		a.applyPending()
		if a.scan(ctx) {
			soon()
		}
		// Above cache_high, down to cache_low; a removal kicks a scan.
		a.evictIfHigh(ctx)
		scanT.Reset(a.Config().ScanInterval)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-scanT.C:
			rescan()
		case k := <-a.kickc:
			if k == kickScan {
				rescan()
			}
			soon()
		case <-reportT.C:
			_, _, err := a.report(ctx)
			if ctx.Err() != nil {
				return
			}
			var wait time.Duration
			if err != nil {
				a.mu.Lock()
				n := a.failures
				a.mu.Unlock()
				wait = backoff(n, a.backoffBase, a.backoffCap)
			} else {
				wait = jitter(a.Config().ReportInterval)
			}
			reportAt = time.Now().Add(wait)
			a.mu.Lock()
			a.result.NextAttempt = reportAt.UTC()
			a.mu.Unlock()
			reportT.Reset(wait)
		}
	}
}
