package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/evict"
	"github.com/llmgw/llmgw/weights/fetch"
	"github.com/llmgw/llmgw/weights/gc"
)

// The agent's side of eviction (weights/evict decides): it gathers the
// cache's entries (weights/gc.Entries), knows when a job last used each,
// asks the coordinator which copies are their fabric's last (POST
// /v1/evict), plans, has the coordinator grant each copy it believes
// another node also holds, and removes through gc's checks. It runs after
// a scan finds the cache above cache_high (down to cache_low), and when a
// fetch does not fit (Fetcher.MakeRoom: the shortfall).
//
// A prefetch plugs in through Room: it claims at evict.Prefetch and gets
// only the room below cache_low, so it never evicts and never takes what a
// job's fetch needs; what it brought is recorded (notePrefetched) until a
// job uses it, and is the first eviction takes within its class. Hub snapshots (the HF cache layout) are entries
// when the Hugging Face cache is on the cache's filesystem (weights/gc's
// hubevict.go): an old snapshot of a repository the catalog lists at
// another commit is evict.Superseded, the catalog commit's is wanted, and
// a Hub fetch claims its room whole in the same record as a set
// (weights/fetch), so it evicts by the same rules when it does not fit.

// evictState is what eviction keeps between passes.
type evictState struct {
	mu sync.Mutex // serialises passes, and guards the rest
	// used is when a job on this node last used each cache entry, by name;
	// kept in the state directory (usedFile) across restarts.
	used map[string]time.Time
	// prefetched is when a prefetch brought each cache entry no job on
	// this node has used since, by name; kept in prefetchedFile. Eviction
	// takes these first within their class (evict.Entry.Prefetched).
	prefetched map[string]time.Time
	loaded     bool
	dirty      bool // used or prefetched changed since they were last written
	// recent are the last evictions, newest last, for `llmgw gc`.
	recent []api.GCFile
	// lastHeld is the last pass's account of what it could not free, so
	// that a cache that stays above cache_high is logged once per change,
	// not once per scan.
	lastHeld string
}

// usedFile is the state directory's record of when jobs last used each
// cache entry; prefetchedFile its record of the entries prefetches brought
// that no job has used yet.
const (
	usedFile       = "used.json"
	prefetchedFile = "prefetched.json"
)

// maxRecentEvictions is how many evictions `llmgw gc` shows.
const maxRecentEvictions = 100

// noteUse records that a job uses the cache entries named, now.
func (a *Agent) noteUse(cfg Config, names ...string) {
	if !slices.ContainsFunc(names, func(n string) bool { return n != "" }) {
		return
	}
	s := &a.evict
	s.mu.Lock()
	defer s.mu.Unlock()
	a.loadUsedLocked(cfg)
	now := time.Now().UTC()
	for _, n := range names {
		if n == "" {
			continue
		}
		s.used[n] = now
		delete(s.prefetched, n)
	}
	s.dirty = true
	a.saveUsedLocked(cfg)
}

// notePrefetched records that a prefetch brought the cache entry name,
// which no job has used yet: until one does (noteUse, or a job record
// naming it at an eviction pass), eviction takes it first within its
// class.
func (a *Agent) notePrefetched(cfg Config, name string) {
	if name == "" {
		return
	}
	s := &a.evict
	s.mu.Lock()
	defer s.mu.Unlock()
	a.loadUsedLocked(cfg)
	if _, used := s.used[name]; used {
		// A job used it while the prefetch ran (it joined the fetch, or
		// found the file the fetch had just sealed).
		return
	}
	s.prefetched[name] = time.Now().UTC()
	s.dirty = true
	a.saveUsedLocked(cfg)
}

func (a *Agent) loadUsedLocked(cfg Config) {
	s := &a.evict
	if s.loaded {
		return
	}
	s.loaded, s.used, s.prefetched = true, map[string]time.Time{}, map[string]time.Time{}
	b, err := os.ReadFile(filepath.Join(cfg.StateDir, usedFile))
	if err == nil {
		if err := json.Unmarshal(b, &s.used); err != nil {
			a.log.WithError(err).Warn("evict: the record of when jobs last used the cache is unreadable; starting it anew")
			s.used = map[string]time.Time{}
		}
	}
	b, err = os.ReadFile(filepath.Join(cfg.StateDir, prefetchedFile))
	if err == nil {
		if err := json.Unmarshal(b, &s.prefetched); err != nil {
			a.log.WithError(err).Warn("evict: the record of what prefetches brought is unreadable; starting it anew")
			s.prefetched = map[string]time.Time{}
		}
	}
}

func (a *Agent) saveUsedLocked(cfg Config) {
	if !a.evict.dirty {
		return
	}
	a.evict.dirty = false
	b, _ := json.Marshal(a.evict.used)
	if err := catalog.WriteAtomic(filepath.Join(cfg.StateDir, usedFile), b, 0o644); err != nil {
		a.log.WithError(err).Debug("evict: the record of when jobs last used the cache could not be written")
	}
	b, _ = json.Marshal(a.evict.prefetched)
	if err := catalog.WriteAtomic(filepath.Join(cfg.StateDir, prefetchedFile), b, 0o644); err != nil {
		a.log.WithError(err).Debug("evict: the record of what prefetches brought could not be written")
	}
}

// recordEntry is the cache entry a job's record says the job uses, or ""
// for weights outside the cache (a path, a model id).
func recordEntry(rec catalog.JobRecord) string {
	if rest, ok := strings.CutPrefix(rec.Source, "hf:"); ok && rec.HFCache != "" {
		if i := strings.LastIndexByte(rest, '@'); i > 0 {
			return gc.HubEntryName(rest[:i], rest[i+1:])
		}
	}
	if rec.Set != "" {
		return rec.Set
	}
	if catalog.KindOf(rec.Source) == catalog.KindRemote {
		return catalog.CacheName(rec.Source)
	}
	return ""
}

// usedName is the cache entry a fetch of req lands in.
func usedName(req api.EnsureRequest) string {
	if req.Hub != nil {
		return gc.HubEntryName(req.Hub.Repo, req.Hub.Commit)
	}
	if req.Set != "" {
		return req.Set
	}
	if catalog.KindOf(req.Source) == catalog.KindRemote {
		return catalog.CacheName(req.Source)
	}
	return ""
}

// budget is the cache's space as eviction sees it, with the entries it
// was computed from.
func (a *Agent) budget(ctx context.Context, cfg Config, f *fetch.Fetcher, entries []gc.Entry) (evict.Budget, error) {
	room, err := fetch.RoomFor(cfg.CacheDir)
	if err != nil {
		return evict.Budget{}, err
	}
	b := evict.Budget{Free: room.Free, Reserve: f.Reserve(cfg.CacheDir), High: cfg.CacheHigh, Low: cfg.CacheLow}
	for _, e := range entries {
		b.Cached += e.Size
	}
	if c, err := f.Claimed(ctx, cfg.CacheDir); err == nil {
		b.Claimed = c
	}
	return b, nil
}

// Room answers "may I claim n bytes at priority p" on the cache's
// filesystem: with ok, the claim fits once evict bytes are evicted (a
// Job claim only; the caller evicts through MakeRoom by fetching).
func (a *Agent) Room(ctx context.Context, n int64, p evict.Priority) (evictBytes int64, ok bool, why string, err error) {
	b, err := a.budgetNow(ctx)
	if err != nil {
		return 0, false, "", err
	}
	evictBytes, ok, why = b.Claim(n, p)
	return evictBytes, ok, why, nil
}

// budgetNow is the cache's budget as it is now.
func (a *Agent) budgetNow(ctx context.Context) (evict.Budget, error) {
	cfg := a.Config()
	a.mu.Lock()
	f := a.fetcherLocked()
	a.mu.Unlock()
	entries, err := gc.Entries(a.gcOptions(cfg))
	if err != nil {
		return evict.Budget{}, err
	}
	return a.budget(ctx, cfg, f, entries)
}

func (a *Agent) gcOptions(cfg Config) gc.Options {
	cp, cerr := catalog.ReadCopy(a.catalog.Path)
	// PartMaxAge as the node's gc has it: what a stopped Hub fetch left in
	// staging is garbage to eviction exactly when it is to gc.
	return gc.Options{CacheDir: cfg.CacheDir, HFCache: cfg.HFCacheDir(), Catalog: cp, CatalogErr: cerr, RunDir: cfg.RunDir, PartMaxAge: cfg.GCPartMaxAge}
}

// evictPlan is one pass's plan, with what it was made from.
type evictPlan struct {
	budget  evict.Budget
	need    int64
	res     evict.Result
	fabric  evict.Fabric
	entries []evict.Entry
	paths   map[string]string // entry name → where it is
}

// planEviction plans freeing need bytes (need < 0: what the watermarks
// ask). The caller holds a.evict.mu.
func (a *Agent) planEviction(ctx context.Context, cfg Config, need int64) (evictPlan, error) {
	var p evictPlan
	a.mu.Lock()
	f := a.fetcherLocked()
	a.mu.Unlock()
	opt := a.gcOptions(cfg)
	raw, err := gc.Entries(opt)
	if err != nil {
		return p, err
	}
	if p.budget, err = a.budget(ctx, cfg, f, raw); err != nil {
		return p, err
	}
	p.need = need
	if need < 0 {
		p.need = p.budget.Pressure()
	}
	if opt.CatalogErr != nil && p.need > 0 {
		return p, fmt.Errorf("the catalog copy cannot be read (%v), so what is wanted cannot be told", opt.CatalogErr)
	}
	a.loadUsedLocked(cfg)
	now := time.Now()
	var models []string
	for _, e := range raw {
		if e.InUse != "" {
			// A running job uses it: that is a use, whether or not the
			// agent fetched it for that job. Noted once a minute at most:
			// the record is written to disk when it changes.
			if now.Sub(a.evict.used[e.Name]) > time.Minute {
				a.evict.used[e.Name] = now.UTC()
				a.evict.dirty = true
			}
			if _, ok := a.evict.prefetched[e.Name]; ok {
				delete(a.evict.prefetched, e.Name)
				a.evict.dirty = true
			}
		}
		_, pre := a.evict.prefetched[e.Name]
		ee := evict.Entry{Name: e.Name, Size: e.Size, Written: e.Written, LastUsed: a.evict.used[e.Name], InUse: e.InUse, Fetching: e.Fetching, Class: evict.Unwanted, Prefetched: pre}
		if e.Wanted != "" {
			ee.Class, ee.Model = evict.Wanted, e.Wanted
			models = append(models, e.Wanted)
		} else if e.Superseded != "" {
			ee.Class, ee.Model = evict.Superseded, e.Superseded
		} else if m, ok := opt.Catalog.SupersededBy(e.Name); ok {
			ee.Class, ee.Model = evict.Superseded, m
		}
		p.entries = append(p.entries, ee)
		if p.paths == nil {
			p.paths = map[string]string{}
		}
		p.paths[e.Name] = e.Path
	}
	// Forget uses of entries that are gone.
	present := make(map[string]bool, len(raw))
	for _, e := range raw {
		present[e.Name] = true
	}
	for _, m := range []map[string]time.Time{a.evict.used, a.evict.prefetched} {
		for n := range m {
			if !present[n] {
				delete(m, n)
				a.evict.dirty = true
			}
		}
	}
	a.saveUsedLocked(cfg)
	if p.need <= 0 {
		return p, nil
	}
	p.fabric, _ = a.askFabric(ctx, cfg, api.EvictQuery{Node: cfg.Node, Models: models})
	p.res = evict.Plan(p.entries, p.need, p.fabric, evict.Policy{Now: now, KeepLastCopyFor: cfg.KeepLastCopyFor})
	return p, nil
}

// askFabric asks the coordinator about the fabric's copies; an agent with
// no coordinator, or one that does not answer, gets the error as its
// answer, and every copy of a recently used model then counts as the last.
func (a *Agent) askFabric(ctx context.Context, cfg Config, q api.EvictQuery) (evict.Fabric, []string) {
	fab := evict.Fabric{Others: map[string]int{}}
	if cfg.Coordinator == "" {
		fab.Err = errors.New("no coordinator is configured")
		return fab, nil
	}
	c, err := a.client(cfg)
	if err != nil {
		fab.Err = err
		return fab, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ans, err := c.Evict(ctx, q)
	if err != nil {
		fab.Err = fmt.Errorf("the coordinator did not say which copies are the fabric's last: %w", err)
		return fab, nil
	}
	fab.Others = ans.Others
	return fab, ans.Granted
}

// evictNow frees need bytes (need < 0: down to cache_low when above
// cache_high) and returns what it freed and, when short, what holds the
// rest. trigger names why, for the metrics and the log.
func (a *Agent) evictNow(ctx context.Context, need int64, trigger string) (freed int64, held string) {
	cfg := a.Config()
	a.evict.mu.Lock()
	defer a.evict.mu.Unlock()
	p, err := a.planEviction(ctx, cfg, need)
	if err != nil {
		// Once per change for the pass after each scan: an agent without
		// a catalog copy yet must not say so every scan.
		if trigger == "fetch" || err.Error() != a.evict.lastHeld {
			a.log.WithError(err).Warn("evict: nothing evicted")
		}
		a.evict.lastHeld = err.Error()
		return 0, "nothing could be evicted: " + err.Error()
	}
	if p.need <= 0 {
		a.metrics.evictHeld.Set(0)
		return 0, ""
	}
	res := a.granted(ctx, cfg, p)
	reasons := map[string]string{}
	class := map[string]evict.Class{}
	for _, d := range res.Evict {
		reasons[d.Name] = d.Reason
		class[d.Name] = d.Class
	}
	out := gc.Result{}
	if len(reasons) > 0 {
		opt := a.gcOptions(cfg)
		out = gc.Evict(opt, reasons)
	}
	now := time.Now().UTC()
	for _, f := range out.Files {
		log := a.log.WithFields(logrus.Fields{"name": f.Name, "size_bytes": f.Size, "trigger": trigger, "class": class[f.Name].String()})
		if f.Action != gc.Removed {
			log.WithField("action", f.Action).Warn("evict: not removed: " + f.Reason)
			continue
		}
		freed += f.Size
		a.metrics.evictions.WithLabelValues(class[f.Name].String(), trigger).Inc()
		a.metrics.evictedBytes.WithLabelValues(class[f.Name].String()).Add(float64(f.Size))
		log.Info(f.Reason)
		delete(a.evict.used, f.Name)
		delete(a.evict.prefetched, f.Name)
		a.evict.dirty = true
		a.evict.recent = append(a.evict.recent, api.GCFile{Name: f.Name, Path: f.Path, Action: "evicted", Reason: now.Format(time.RFC3339) + " (" + trigger + "): " + strings.TrimPrefix(f.Reason, "evicted: "), Size: f.Size})
	}
	if n := len(a.evict.recent); n > maxRecentEvictions {
		a.evict.recent = append([]api.GCFile(nil), a.evict.recent[n-maxRecentEvictions:]...)
	}
	a.saveUsedLocked(cfg)
	short := max(0, p.need-freed)
	a.metrics.evictHeld.Set(float64(short))
	if short > 0 {
		held = heldSummary(res, short)
		// Which entries hold the room, not how long ago they were used:
		// logged when that changes, or for a fetch.
		var names []string
		for _, d := range res.Held {
			names = append(names, d.Name)
		}
		what := strings.Join(names, " ")
		if trigger == "fetch" || freed > 0 || what != a.evict.lastHeld {
			a.log.WithFields(logrus.Fields{"need_bytes": p.need, "freed_bytes": freed, "trigger": trigger}).Warn("evict: short of room: " + held)
		}
		a.evict.lastHeld = what
	} else {
		a.evict.lastHeld = ""
	}
	if freed > 0 {
		a.kick(kickScan)
	}
	return freed, held
}

// granted returns p's plan with every wanted copy it took for one another
// node also holds granted by the coordinator: another node of the fabric
// may be evicting its copy at this very moment. A copy refused is its
// fabric's last now; the plan is made again knowing it, once, and a copy
// still not granted stays.
func (a *Agent) granted(ctx context.Context, cfg Config, p evictPlan) evict.Result {
	res := p.res
	granted := map[string]bool{}
	for round := 0; round < 2; round++ {
		var ask []string
		for _, d := range res.Evict {
			if d.Class == evict.Wanted && !d.LastCopy && !granted[d.Model] {
				ask = append(ask, d.Model)
			}
		}
		if len(ask) == 0 {
			return res
		}
		_, got := a.askFabric(ctx, cfg, api.EvictQuery{Node: cfg.Node, Evict: ask})
		for _, m := range got {
			granted[m] = true
		}
		refused := false
		for _, m := range ask {
			if !granted[m] {
				p.fabric.Others[m] = 0
				refused = true
			}
		}
		if !refused {
			return res
		}
		res = evict.Plan(p.entries, p.need, p.fabric, evict.Policy{Now: time.Now(), KeepLastCopyFor: cfg.KeepLastCopyFor})
	}
	keep := res.Evict[:0]
	for _, d := range res.Evict {
		if d.Class != evict.Wanted || d.LastCopy || granted[d.Model] {
			keep = append(keep, d)
		}
	}
	res.Evict = keep
	return res
}

// heldSummary says what holds the bytes a plan could not free: what the
// job's reason quotes, so it names the holders and why.
func heldSummary(res evict.Result, short int64) string {
	if len(res.Held) == 0 {
		return fmt.Sprintf("eviction found nothing more to remove (%s short)", catalog.FormatBytes(short))
	}
	held := append([]evict.Decision(nil), res.Held...)
	sort.SliceStable(held, func(i, j int) bool { return held[i].Size > held[j].Size })
	var parts []string
	var bytes int64
	for i, d := range held {
		bytes += d.Size
		if i < 3 {
			parts = append(parts, fmt.Sprintf("%s (%s): %s", d.Name, catalog.FormatBytes(d.Size), d.Reason))
		}
	}
	more := ""
	if len(held) > 3 {
		more = fmt.Sprintf(" and %d more", len(held)-3)
	}
	return fmt.Sprintf("eviction could not free %s: %s of the cache is held, %s%s", catalog.FormatBytes(short), catalog.FormatBytes(bytes), strings.Join(parts, "; "), more)
}

// makeRoom is the Fetcher's MakeRoom: a fetch that does not fit evicts by
// the same rules first. Only a fetch onto the cache's own filesystem: the
// cache directory, a set directory, a Hub model's blobs in a Hugging Face
// cache beside it; eviction frees room there and nowhere else.
func (a *Agent) makeRoom(ctx context.Context, dir string, need int64) (int64, string) {
	if !sameFilesystem(dir, a.Config().CacheDir) {
		return 0, ""
	}
	return a.evictNow(ctx, need, "fetch")
}

// prefetchRoom is the Fetcher's PrefetchRoom: a prefetch's claim of need
// more bytes fits when the cache's budget at evict.Prefetch has room for
// it (Room: below cache_low, beside every claim in the record). Only on
// the cache's own filesystem, the one the budget is of: a Hugging Face
// cache elsewhere (a filer) is not prefetched into.
func (a *Agent) prefetchRoom(ctx context.Context, dir string, need int64) (bool, string) {
	if !sameFilesystem(dir, a.Config().CacheDir) {
		return false, dir + " is not on the cache's filesystem, the one whose budget a prefetch is held to"
	}
	_, ok, why, err := a.Room(ctx, need, evict.Prefetch)
	if err != nil {
		return false, "the cache's budget cannot be told: " + err.Error()
	}
	return ok, why
}

// sameFilesystem says whether a and b are on one filesystem.
func sameFilesystem(a, b string) bool {
	var sa, sb syscall.Stat_t
	return syscall.Stat(a, &sa) == nil && syscall.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// evictIfHigh runs a pass when the cache is above cache_high.
func (a *Agent) evictIfHigh(ctx context.Context) {
	a.evictNow(ctx, -1, "watermark")
}

// evictionListing is what `llmgw gc` shows of eviction on this node: the
// recent evictions, and, when the cache is above cache_high, what a pass
// would evict now (listed) and what it would keep.
func (a *Agent) evictionListing(ctx context.Context, cfg Config) []api.GCFile {
	a.evict.mu.Lock()
	defer a.evict.mu.Unlock()
	out := append([]api.GCFile(nil), a.evict.recent...)
	p, err := a.planEviction(ctx, cfg, -1)
	if err != nil || p.need <= 0 {
		return out
	}
	for _, d := range p.res.Evict {
		out = append(out, api.GCFile{Name: d.Name, Path: p.paths[d.Name], Action: "listed",
			Reason: fmt.Sprintf("eviction would remove it: the cache is above cache_high (%d%%); %s", p.budget.High, d.Reason), Size: d.Size})
	}
	for _, d := range p.res.Held {
		out = append(out, api.GCFile{Name: d.Name, Path: p.paths[d.Name], Action: "kept",
			Reason: "eviction keeps it: " + d.Reason, Size: d.Size})
	}
	return out
}
