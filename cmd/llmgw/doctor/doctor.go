// Package doctor checks that a host is set up for llmgw and says, for each
// problem, how to fix it: the Slurm settings the hooks depend on (from the
// running slurmctld and from the slurm.conf this host's slurmd reads), the
// SPANK plugin and job_submit/lua, the agent's socket, the coordinator and
// its token, and the fetch cache.
//
// It gathers facts from every side of llmgw but changes nothing, and it links
// no server code: the checks read files, ask scontrol through slurm.Runner,
// and speak to the agent and the coordinator through their api clients.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/scan"
)

// Severity says what a finding means for jobs.
type Severity int

const (
	// OK: checked and right.
	OK Severity = iota
	// Warn: llmgw works less well (no placement, no reports), but jobs run.
	Warn
	// Error: jobs on this host would fail, or the node would be drained.
	Error
)

func (s Severity) String() string {
	switch s {
	case Warn:
		return "warn"
	case Error:
		return "error"
	}
	return "ok"
}

// MarshalText makes --json say "error", not 2.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// A Finding is one thing the doctor checked.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	// Message says what was found; Fix what to do about it (empty when OK).
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Installed paths, as the package puts them (packaging/nfpm.yaml).
const (
	DefaultHookDir     = "/usr/libexec/llmgw"
	DefaultSpankPlugin = "/usr/lib/llmgw/llmgw_spank.so"
	// DefaultPluginDir is Debian's Slurm PluginDir, where a plugstack line
	// with a relative path is looked for when slurm.conf names none.
	DefaultPluginDir = "/usr/lib/x86_64-linux-gnu/slurm-wlm"
)

// DefaultConfCache are the copies of slurm.conf a configless slurmd keeps:
// its cache SlurmdSpoolDir/conf-cache (the default spool /var/spool/slurmd),
// and /run/slurm/conf, the link slurmd makes to it; so in 22.05, 24.11 and
// 26.05 alike (the paths in their slurmd binaries).
var DefaultConfCache = []string{"/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf"}

// PrologMargin is how much longer than the fetch deadline the Prolog may be
// given: after the deadline the hook still records the failure and answers,
// and slurmd polls the Prolog's exit on its own clock. Less, and a fetch
// that runs to its deadline gets the Prolog killed, which drains the node.
const PrologMargin = 30 * time.Second

// unlimitedTimeout is what slurm.conf(5) and scontrol show for "wait
// forever", the default of PrologEpilogTimeout.
const unlimitedTimeout = 65534

// Options are the facts about this host that the doctor does not find by
// itself: where things are, as the agent's configuration says.
type Options struct {
	// Runner runs scontrol (with SLURM_CONF in its environment when set).
	Runner *slurm.Runner
	// SlurmConf is the slurm.conf this host's slurmd reads (SLURM_CONF, else
	// slurm.DefaultConf).
	SlurmConf string
	// SlurmConfFromEnv: SLURM_CONF named SlurmConf, so a missing file is an
	// error and not a configless node.
	SlurmConfFromEnv bool
	// ConfCache are where a configless slurmd keeps the slurm.conf it
	// fetched from slurmctld, looked at when SlurmConf is the default and
	// missing (default DefaultConfCache).
	ConfCache []string

	// HookDir holds llmgw's Prolog, Epilog and TaskProlog (default
	// DefaultHookDir); SpankPlugin is the plugin's installed path (default
	// DefaultSpankPlugin): it is recognised in plugstack.conf by file name.
	HookDir     string
	SpankPlugin string

	// AgentConfigErr is why the agent's configuration could not be loaded;
	// the agent would not start with it.
	AgentConfigErr error
	// From the agent's configuration.
	Socket   string
	CacheDir string
	// HFCache is the Hugging Face cache Hub models are fetched into
	// (agent.toml's hf_cache, defaults applied).
	HFCache     string
	Coordinator string
	TokenFile   string
	// TLSCA is the CA file the agent verifies the coordinator with.
	TLSCA string
	// FetchDeadline is how long the Prolog waits for weights.
	FetchDeadline time.Duration

	// Timeout bounds each network check (default 5 s).
	Timeout time.Duration
}

// Run checks this host and returns what it found, in a fixed order: Slurm
// settings, then the agent, the coordinator, the cache.
func Run(ctx context.Context, o Options) []Finding {
	o = o.withDefaults()
	var fs []Finding
	s := gatherSlurm(ctx, o)
	fs = append(fs, s.findings...)
	fs = append(fs, checkSlurm(s, o)...)
	fs = append(fs, checkAgentConfig(o)...)
	fs = append(fs, checkAgent(ctx, o)...)
	fs = append(fs, checkTransport(o)...)
	fs = append(fs, checkCoordinator(ctx, o)...)
	fs = append(fs, checkFeatures(ctx, o)...)
	fs = append(fs, checkCache(ctx, o)...)
	fs = append(fs, checkHFCache(ctx, o)...)
	return fs
}

func (o Options) withDefaults() Options {
	if o.HookDir == "" {
		o.HookDir = DefaultHookDir
	}
	if o.SpankPlugin == "" {
		o.SpankPlugin = DefaultSpankPlugin
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Runner == nil {
		o.Runner = &slurm.Runner{}
	}
	if o.ConfCache == nil {
		o.ConfCache = DefaultConfCache
	}
	return o
}

// CheckSettings checks Slurm's settings as read from the slurm.conf at
// confPath (file) and from the running controller (live); either may be nil
// when it could not be read. Run calls it; it is exported so that the
// settings llmgw documents can be checked by the same rules.
func CheckSettings(file slurm.Config, confPath string, live slurm.Config, o Options) []Finding {
	return checkSlurm(slurmView{confPath: confPath, file: file, live: live}, o.withDefaults())
}

// CheckSettingsOf is CheckSettings for a known Slurm release (what
// `scontrol --version` says), whose rules some settings depend on.
func CheckSettingsOf(version slurm.Version, file slurm.Config, confPath string, live slurm.Config, o Options) []Finding {
	return checkSlurm(slurmView{confPath: confPath, file: file, live: live, version: version}, o.withDefaults())
}

// Broken reports whether any finding would break jobs.
func Broken(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Severity == Error })
}

// --- Slurm ------------------------------------------------------------------

// slurmView is Slurm's configuration as seen from this host: the file its
// slurmd reads and the running controller's, either of which may be missing.
type slurmView struct {
	confPath string
	file     slurm.Config  // nil when unreadable
	live     slurm.Config  // nil when scontrol failed
	version  slurm.Version // zero when scontrol --version failed
	findings []Finding
}

func gatherSlurm(ctx context.Context, o Options) slurmView {
	v := slurmView{confPath: o.SlurmConf}
	if v.confPath == "" {
		v.confPath = slurm.DefaultConf
	}
	var err error
	cached := false
	v.file, err = slurm.ReadConf(v.confPath)
	if errors.Is(err, os.ErrNotExist) && !o.SlurmConfFromEnv {
		// A configless node has no slurm.conf of its own: slurmd runs
		// the copy it fetched from slurmctld, and so do the hooks.
		for _, c := range o.ConfCache {
			if f, cerr := slurm.ReadConf(c); cerr == nil {
				v.file, v.confPath, err, cached = f, c, nil, true
				v.findings = append(v.findings, Finding{Check: "slurm.conf",
					Message: fmt.Sprintf("%s is missing; configless node: read slurmd's cached copy %s", slurm.DefaultConf, c)})
				break
			}
		}
	}
	if err != nil {
		v.file = nil
		v.findings = append(v.findings, Finding{Check: "slurm.conf", Severity: Error,
			Message: fmt.Sprintf("cannot read %s: %v", v.confPath, err),
			Fix:     "run llmgw doctor on a Slurm node, or point SLURM_CONF at the cluster's slurm.conf"})
	} else if !cached {
		v.findings = append(v.findings, Finding{Check: "slurm.conf", Message: "read " + v.confPath})
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if v.version, err = o.Runner.Version(ctx); err != nil {
		v.findings = append(v.findings, Finding{Check: "Slurm release", Severity: Warn,
			Message: fmt.Sprintf("cannot tell which Slurm runs here: %v; the SPANK plugin's release is not checked", err),
			Fix:     "install Slurm's client commands (scontrol) on this host, or put them on PATH"})
	} else {
		v.findings = append(v.findings, Finding{Check: "Slurm release", Message: "Slurm " + v.version.String()})
	}
	if v.live, err = o.Runner.ShowConfig(ctx); err != nil {
		v.live = nil
		v.findings = append(v.findings, Finding{Check: "slurmctld", Severity: Warn,
			Message: fmt.Sprintf("cannot read the running configuration: %v; checking slurm.conf alone", err),
			Fix:     "check that slurmctld is up (scontrol ping) and that this host can reach it"})
	} else {
		v.findings = append(v.findings, Finding{Check: "slurmctld", Message: "read the running configuration (scontrol show config)"})
	}
	return v
}

// sourced is a setting's value and where it was read.
type sourced struct {
	val, from string
}

// values returns key's value from each side that could be read, as one entry
// when both agree. norm makes equal settings compare equal (case, defaults).
// The file is what this host's slurmd runs and the next controller restart
// will run; the live value is what the controller runs now. Both matter.
func (v slurmView) values(key string, norm func(string) string) []sourced {
	return v.valuesBy(func(c slurm.Config) string { s, _ := c.Get(key); return s }, norm)
}

// valuesBy is values for a setting that get reads from a configuration.
func (v slurmView) valuesBy(get func(slurm.Config) string, norm func(string) string) []sourced {
	var out []sourced
	var fv, lv string
	if v.file != nil {
		fv = norm(get(v.file))
		out = append(out, sourced{fv, v.confPath})
	}
	if v.live != nil {
		lv = norm(get(v.live))
		if v.file != nil && lv == fv {
			out[0].from = v.confPath + " and the running slurmctld"
		} else {
			out = append(out, sourced{lv, "the running slurmctld"})
		}
	}
	return out
}

func same(s string) string { return s }

// differs is the finding for a setting whose file and live values disagree.
// It is a check of its own: the setting's check judges each value.
func differs(key string, vs []sourced) []Finding {
	if len(vs) < 2 {
		return nil
	}
	return []Finding{{Check: "running config", Severity: Warn,
		Message: fmt.Sprintf("%s is %q in slurm.conf but %q in the running slurmctld", key, vs[0].val, vs[1].val),
		Fix:     "restart slurmctld and slurmd (or scontrol reconfigure) so that both run slurm.conf"}}
}

func checkSlurm(v slurmView, o Options) []Finding {
	if v.file == nil && v.live == nil {
		return nil
	}
	var fs []Finding
	fs = append(fs, checkPrologFlags(v)...)
	for _, h := range []struct{ key, name string }{{"Prolog", "prolog"}, {"Epilog", "epilog"}, {"TaskProlog", "task-prolog"}} {
		fs = append(fs, checkHook(v, o, h.key, h.name)...)
	}
	fs = append(fs, checkTimeout(v, o)...)
	fs = append(fs, checkSpank(v, o)...)
	fs = append(fs, checkJobSubmit(v)...)
	fs = append(fs, checkPreferValidation(v)...)
	fs = append(fs, checkBackfill(v)...)
	fs = append(fs, checkNodeFeatures(v)...)
	return fs
}

func lowerList(s string) string {
	parts := strings.Split(strings.ToLower(s), ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	slices.Sort(parts)
	return strings.Trim(strings.Join(parts, ","), ",")
}

// allocFlags are the PrologFlags that set Alloc too, as slurmctld shows
// them (`scontrol show config` for PrologFlags=FLAG alone, captured on each
// release: slurm/testdata/*/prologflags.txt): Contain, X11 and NoHold from
// 22.05, RunInJob and ForceRequeueOnFail where they exist (not 22.05);
// DeferBatch only from 26.05 (24.11 shows DeferBatch alone; releases
// between are not known here, and an Alloc written out does no harm).
func allocFlags(v slurm.Version) []string {
	fs := []string{"alloc", "contain", "x11", "nohold", "runinjob", "forcerequeueonfail"}
	if v.AtLeast(26, 5) {
		fs = append(fs, "deferbatch")
	}
	return fs
}

func checkPrologFlags(v slurmView) []Finding {
	vs := v.values("PrologFlags", lowerList)
	fs := differs("PrologFlags", vs)
	implying := allocFlags(v.version)
	for _, s := range vs {
		flags := strings.Split(s.val, ",")
		if slices.Contains(flags, "serial") {
			fs = append(fs, Finding{Check: "PrologFlags", Severity: Warn,
				Message: fmt.Sprintf("PrologFlags=%s in %s has Serial: one job's Prolog waiting minutes for its weights holds every other job's Prolog and Epilog on the node", s.val, s.from),
				Fix:     "drop Serial from PrologFlags in slurm.conf unless a site prolog needs it, then restart slurmctld and slurmd"})
		}
		if i := slices.IndexFunc(flags, func(f string) bool { return slices.Contains(implying, f) }); i >= 0 {
			how := ""
			if flags[i] != "alloc" {
				how = fmt.Sprintf(" (%s implies Alloc)", flags[i])
			}
			fs = append(fs, Finding{Check: "PrologFlags", Message: fmt.Sprintf("PrologFlags=%s in %s%s", s.val, s.from, how)})
			continue
		}
		fs = append(fs, Finding{Check: "PrologFlags", Severity: Error,
			Message: fmt.Sprintf("PrologFlags has no Alloc in %s (%q): while llmgw's Prolog waits for weights, srun fails after about 2×MessageTimeout", s.from, s.val),
			Fix:     "add Alloc to PrologFlags in slurm.conf (PrologFlags=Alloc, keeping any others), then restart slurmctld and slurmd"})
	}
	return fs
}

// checkHook checks that Prolog, Epilog or TaskProlog runs llmgw's hook, and
// that what it names exists here and can be run: slurmd drains the node
// when a Prolog or Epilog it cannot run fails.
func checkHook(v slurmView, o Options, key, name string) []Finding {
	ours := filepath.Join(o.HookDir, name)
	// From 24.05 Prolog and Epilog may be given several times, each run in
	// turn (Prolog[0], Prolog[1]... in scontrol show config): llmgw's may be
	// any of them, and each must be runnable. The list is held joined by
	// newlines, which no path Slurm splits on holds.
	vs := v.valuesBy(func(c slurm.Config) string {
		all := c.All(key)
		if len(all) > 1 && v.version != (slurm.Version{}) && !v.version.AtLeast(24, 5) {
			all = all[len(all)-1:] // before 24.05 the last line wins, as for any key
		}
		return strings.Join(all, "\n")
	}, same)
	fs := differs(key, vs)
	fix := fmt.Sprintf("set %s=%s in slurm.conf, then restart slurmd (see /usr/share/doc/llmgw/slurm.conf.snippet)", key, ours)
	if key != "TaskProlog" {
		// Beside the site's own scripts, as the README installs it.
		fix = fmt.Sprintf("link %s into the %s directory slurm.conf globs (ln -s %s /etc/slurm/%s.d/00-llmgw with %s=/etc/slurm/%s.d/*), or set %s=%s when the site has no %s of its own; then restart slurmd (see /usr/share/doc/llmgw/slurm.conf.snippet)",
			ours, name, ours, name, key, name, key, ours, key)
	}
	for _, s := range vs {
		if s.val == "" {
			fs = append(fs, Finding{Check: key, Severity: Error,
				Message: fmt.Sprintf("%s is not set in %s: llmgw's %s never runs, so jobs get no weights", key, s.from, name), Fix: fix})
			continue
		}
		paths, empty := runOrder(key, strings.Split(s.val, "\n"))
		shown := strings.ReplaceAll(s.val, "\n", " "+key+"=")
		if len(empty) > 0 {
			fs = append(fs, Finding{Check: key, Severity: Error,
				Message: fmt.Sprintf("%s=%s (%s): %s matches no file here; slurmd then fails the %s of every job and drains the node", key, shown, s.from, strings.Join(empty, ", "), key),
				Fix:     "link " + ours + " into that directory (ln -s " + ours + " DIR/00-llmgw), or " + fix})
			continue
		}
		var bad []string
		last := -1 // llmgw's hook's place in the run order
		for i, p := range paths {
			if err := executable(p, key == "TaskProlog"); err != nil {
				bad = append(bad, err.Error())
				continue
			}
			if runsOurs(p, ours) {
				last = i
			}
		}
		if len(bad) > 0 {
			sev, what := Error, "slurmd drains the node when it cannot run it"
			if key == "TaskProlog" {
				what = "every job on this node fails"
			}
			fs = append(fs, Finding{Check: key, Severity: sev,
				Message: fmt.Sprintf("%s=%s (%s) cannot run on this host: %s; %s", key, shown, s.from, strings.Join(bad, "; "), what),
				Fix:     "install the llmgw package on this host, or " + fix})
			continue
		}
		if last < 0 {
			fs = append(fs, Finding{Check: key, Severity: Error,
				Message: fmt.Sprintf("%s=%s (%s) does not run llmgw's %s, so jobs get no weights", key, shown, s.from, name),
				Fix:     fix + "; or call " + ours + " from your own " + key})
			continue
		}
		if len(paths) == 1 {
			// What was found, said plainly: whether the site had scripts of
			// its own before llmgw's took their place cannot be told here.
			fs = append(fs, Finding{Check: key, Message: fmt.Sprintf("%s=%s runs llmgw's %s and nothing else (%s); a site with %s scripts of its own runs them beside it: a directory glob or, from Slurm 24.05, another %s= line (README)", key, shown, name, s.from, name, key)})
			continue
		}
		ran := make([]string, len(paths))
		for i, p := range paths {
			ran[i] = filepath.Base(p)
		}
		if after := ran[last+1:]; len(after) > 0 {
			why := "a site health check there runs only after llmgw's prolog, which may wait minutes for weights on a node the check would have failed"
			if key == "Epilog" {
				why = "llmgw's gc then runs before the site's epilog has cleaned up after the job"
			}
			fs = append(fs, Finding{Check: key, Severity: Warn,
				Message: fmt.Sprintf("%s=%s (%s) runs %s in this order: %s runs after llmgw's %s; %s", key, shown, s.from, strings.Join(ran, ", "), strings.Join(after, ", "), name, why),
				Fix:     fmt.Sprintf("slurmd runs a directory glob in reverse byte order and %s= lines in turn (docs/slurm/behaviour.md §10): name llmgw's link so it sorts before every site script in its directory (00-llmgw), or put llmgw's %s= line last", key, key)})
			continue
		}
		fs = append(fs, Finding{Check: key, Message: fmt.Sprintf("%s=%s runs llmgw's %s last, after the site's (in this order: %s) (%s)", key, shown, name, strings.Join(ran, ", "), s.from)})
	}
	return fs
}

// runOrder lists the scripts slurmd runs for key's values, in the order it
// runs them (docs/slurm/behaviour.md §10): each value in turn, a glob's
// matches in reverse byte order (glob(3) sorts them, slurmd, which never
// sets a locale, pushes each to the front of its list). empty are the globs
// that match nothing, which slurmd takes for a failed Prolog. TaskProlog
// takes one program, no glob.
func runOrder(key string, values []string) (paths, empty []string) {
	for _, p := range values {
		if key == "TaskProlog" || !strings.ContainsAny(p, "*?[") {
			paths = append(paths, p)
			continue
		}
		m, err := filepath.Glob(p)
		if err != nil || len(m) == 0 {
			empty = append(empty, p)
			continue
		}
		slices.Sort(m)
		slices.Reverse(m)
		paths = append(paths, m...)
	}
	return paths, empty
}

// executable says why slurmd could not run the hook at p. byUsers: the
// TaskProlog runs as the job's user, so others must be able to read and run
// it (a script is read by its interpreter as that user).
func executable(p string, byUsers bool) error {
	st, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("%s is a directory", p)
	case st.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not executable", p)
	case byUsers && st.Mode()&0o005 != 0o005:
		return fmt.Errorf("%s (mode %04o) cannot be read and run by the job's user", p, st.Mode().Perm())
	}
	return nil
}

// runsOurs reports whether the hook at p is llmgw's: the installed wrapper
// itself (or a link to it), or a script of the site's that names llmgw's
// hook or mentions llmgw, which is how a site chains llmgw's hook from its
// own (and how the dev cluster's hooks in scripts/slurm call bin/llmgw).
func runsOurs(p, ours string) bool {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		if ro, err := filepath.EvalSymlinks(ours); err == nil && r == ro {
			return true
		}
		p = r
	}
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 64<<10)
	n, _ := f.Read(head)
	head = head[:n]
	text := string(head)
	return strings.HasPrefix(text, "#!") && (strings.Contains(text, ours) || strings.Contains(text, "llmgw"))
}

func timeoutNorm(s string) string {
	if s == "" {
		return strconv.Itoa(unlimitedTimeout)
	}
	if f := strings.Fields(s); len(f) > 0 {
		return f[0] // scontrol may add a unit
	}
	return s
}

// checkTimeout compares how long slurmd lets the Prolog run with the fetch
// deadline. From 25.05 PrologTimeout, when set, decides instead of
// PrologEpilogTimeout (slurm.conf(5)); 24.11 and older refuse the key.
func checkTimeout(v slurmView, o Options) []Finding {
	const check = "PrologEpilogTimeout"
	vs := v.valuesBy(func(c slurm.Config) string {
		val, key := c.PrologTimeout()
		return key + "=" + timeoutNorm(val)
	}, same)
	fs := timeoutDiffers(vs)
	need := o.FetchDeadline + PrologMargin
	for _, s := range vs {
		key, val, _ := strings.Cut(s.val, "=")
		secs, err := strconv.Atoi(val)
		switch {
		case err != nil:
			fs = append(fs, Finding{Check: check, Severity: Error,
				Message: fmt.Sprintf("%s=%q in %s is not a number of seconds", key, val, s.from),
				Fix:     fmt.Sprintf("set %s=%d in slurm.conf", key, int(need.Seconds()))})
		case secs == 0 || secs >= unlimitedTimeout:
			fs = append(fs, Finding{Check: check, Message: fmt.Sprintf("%s unlimited (%s)", key, s.from)})
		case time.Duration(secs)*time.Second < need:
			fs = append(fs, Finding{Check: check, Severity: Error,
				Message: fmt.Sprintf("%s=%d in %s is below the fetch deadline (%s) plus %s: a Prolog waiting for weights is killed, and the node drained",
					key, secs, s.from, o.FetchDeadline, PrologMargin),
				Fix: fmt.Sprintf("set %s=%d or more in slurm.conf, or lower fetch_deadline in agent.toml", key, int((need + time.Second - 1).Seconds()))})
		default:
			fs = append(fs, Finding{Check: check,
				Message: fmt.Sprintf("%s=%d in %s covers the fetch deadline (%s)", key, secs, s.from, o.FetchDeadline)})
		}
	}
	return fs
}

// timeoutDiffers is differs for the Prolog timeout, whose values carry the
// key that set them ("PrologTimeout=60"): the key is named once when both
// sides have it.
func timeoutDiffers(vs []sourced) []Finding {
	if len(vs) < 2 {
		return nil
	}
	fk, fv, _ := strings.Cut(vs[0].val, "=")
	lk, lv, _ := strings.Cut(vs[1].val, "=")
	if fk != lk {
		return differs("the Prolog timeout", vs)
	}
	return differs(fk, []sourced{{fv, vs[0].from}, {lv, vs[1].from}})
}

// checkSpank checks that this host's plugstack loads llmgw's SPANK plugin:
// without it sbatch, salloc and srun refuse --llmgw-model here.
func checkSpank(v slurmView, o Options) []Finding {
	def := filepath.Join(filepath.Dir(v.confPath), "plugstack.conf")
	vs := v.values("PlugStackConfig", func(s string) string {
		if s == "" {
			return def
		}
		return s
	})
	fs := differs("PlugStackConfig", vs)
	pluginDir := DefaultPluginDir
	for _, c := range []slurm.Config{v.file, v.live} {
		if d, ok := c.Get("PluginDir"); ok {
			pluginDir = strings.Split(d, ":")[0]
			break
		}
	}
	want := filepath.Base(o.SpankPlugin)
	fix := fmt.Sprintf("put \"optional %s\" in /etc/slurm/plugstack.conf.d/llmgw.conf (the package does) and make sure the PlugStackConfig file includes /etc/slurm/plugstack.conf.d/*.conf", o.SpankPlugin)
	for _, s := range vs {
		plugins, err := slurm.ReadPlugstack(s.val)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fs = append(fs, Finding{Check: "SPANK plugin", Severity: Error,
				Message: fmt.Sprintf("PlugStackConfig %s (%s): %v; Slurm commands on this host fail on it", s.val, s.from, err),
				Fix:     "correct the line it names (spank(8))"})
			continue
		}
		var p *slurm.SpankPlugin
		for i := range plugins {
			if filepath.Base(plugins[i].Path) == want {
				p = &plugins[i]
			}
		}
		if p == nil {
			fs = append(fs, Finding{Check: "SPANK plugin", Severity: Error,
				Message: fmt.Sprintf("%s (PlugStackConfig, %s) does not load %s: sbatch --llmgw-model is refused on this host", s.val, s.from, want),
				Fix:     fix})
			continue
		}
		path := p.Path
		if !filepath.IsAbs(path) {
			path = filepath.Join(pluginDir, path)
		}
		if _, err := os.Stat(path); err != nil {
			what := "it is skipped, and sbatch --llmgw-model is refused"
			if p.Required {
				what = "it is required, so every job step on this host fails"
			}
			fs = append(fs, Finding{Check: "SPANK plugin", Severity: Error,
				Message: fmt.Sprintf("%s names %s, which is missing: %s", p.File, path, what),
				Fix:     "install the llmgw package on this host, or correct the path in " + p.File})
			continue
		}
		if f := spankRelease(path, p.File, p.Required, v.version); f != nil {
			fs = append(fs, *f)
			continue
		}
		built := ""
		if v.version != (slurm.Version{}) {
			built = ", built for Slurm " + v.version.Release()
		}
		fs = append(fs, Finding{Check: "SPANK plugin", Message: fmt.Sprintf("%s loads %s%s", p.File, path, built)})
	}
	return fs
}

// checkJobSubmit checks that the controller runs llmgw's job_submit.lua,
// which steers jobs to the nodes holding their model. Without it jobs still
// run, only not where their weights are.
func checkJobSubmit(v slurmView) []Finding {
	vs := v.values("JobSubmitPlugins", lowerList)
	fs := differs("JobSubmitPlugins", vs)
	lua := filepath.Join(filepath.Dir(v.confPath), "job_submit.lua")
	enabled := false
	for _, s := range vs {
		plugins := strings.Split(s.val, ",")
		if !slices.Contains(plugins, "lua") && !slices.Contains(plugins, "job_submit/lua") {
			fs = append(fs, Finding{Check: "job_submit", Severity: Warn,
				Message: fmt.Sprintf("job_submit/lua is not enabled in %s (JobSubmitPlugins=%q): jobs are not steered to nodes holding their model", s.from, s.val),
				Fix:     "add lua to JobSubmitPlugins in slurm.conf, link /usr/share/llmgw/job_submit.lua to " + lua + " on the slurmctld host, then restart slurmctld"})
			continue
		}
		enabled = true
		fs = append(fs, Finding{Check: "job_submit", Message: "job_submit/lua is enabled in " + s.from})
	}
	if !enabled {
		return fs
	}
	b, err := os.ReadFile(lua)
	switch {
	case err != nil:
		fs = append(fs, Finding{Check: "job_submit.lua", Severity: Warn,
			Message: fmt.Sprintf("%s: %v; slurmctld reads job_submit.lua from there (only the slurmctld host needs it)", lua, errors.Unwrap(err)),
			Fix:     "on the slurmctld host: ln -s /usr/share/llmgw/job_submit.lua " + lua})
	case !strings.Contains(string(b), "llmgw"):
		fs = append(fs, Finding{Check: "job_submit.lua", Severity: Warn,
			Message: lua + " is not llmgw's and does not mention it",
			Fix:     "call llmgw's /usr/share/llmgw/job_submit.lua from it, or link it there"})
	default:
		fs = append(fs, Finding{Check: "job_submit.lua", Message: lua + " is llmgw's"})
	}
	if ctl := controllers(v); len(ctl) > 1 {
		// Only this host can be checked from here; the others are said.
		fs = append(fs, Finding{Check: "job_submit.lua", Message: fmt.Sprintf(
			"slurm.conf names %d controllers (%s): whichever is in charge runs job_submit.lua, so each needs it, and llmgw_submit.lua, beside its slurm.conf, and the coordinator's feature_file readable there (a shared path, or a copy kept in step); without it jobs submitted to a backup in charge get no preference (README)",
			len(ctl), strings.Join(ctl, ", "))})
	}
	return fs
}

// controllers are the hosts slurm.conf (else the running slurmctld) names
// as controllers, the primary first: SlurmctldHost lines, or the older
// ControlMachine and BackupController. A value is "host" or
// "host(address)".
func controllers(v slurmView) []string {
	for _, c := range []slurm.Config{v.file, v.live} {
		if c == nil {
			continue
		}
		var out []string
		for _, h := range c.All("SlurmctldHost") {
			name, _, _ := strings.Cut(h, "(")
			out = append(out, name)
		}
		if len(out) == 0 {
			for _, k := range []string{"ControlMachine", "BackupController"} {
				if h, ok := c.Get(k); ok {
					out = append(out, h)
				}
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// --- agent, coordinator, cache -----------------------------------------------

func checkAgentConfig(o Options) []Finding {
	if o.AgentConfigErr != nil {
		return []Finding{{Check: "agent config", Severity: Error,
			Message: fmt.Sprintf("%v: the agent does not start, and the hooks cannot read it", o.AgentConfigErr),
			Fix:     "correct the file named above (the packaged /etc/llmgw/agent.toml documents every key)"}}
	}
	return []Finding{{Check: "agent config", Message: "agent configuration loads"}}
}

func checkAgent(ctx context.Context, o Options) []Finding {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	sock := o.Socket
	if sock == "" {
		sock = api.DefaultSocket
	}
	st, err := (&api.LocalClient{Socket: sock}).Status(ctx)
	switch {
	case errors.Is(err, api.ErrNoAgent) && errors.Is(err, os.ErrPermission):
		return []Finding{{Check: "agent", Severity: Warn,
			Message: fmt.Sprintf("%v: the socket is root's only", err), Fix: "run llmgw doctor as root"}}
	case errors.Is(err, api.ErrNoAgent):
		return []Finding{{Check: "agent", Severity: Warn,
			Message: fmt.Sprintf("%v: the hooks fetch by themselves, and this node reports nothing to the coordinator", err),
			Fix:     "systemctl enable --now llmgw-agent; its log: journalctl -u llmgw-agent"}}
	case err != nil:
		return []Finding{{Check: "agent", Severity: Warn,
			Message: fmt.Sprintf("the agent answers, but not as expected: %v", err),
			Fix:     "restart it (systemctl restart llmgw-agent), and check that it is the same version as this llmgw"}}
	}
	fs := []Finding{{Check: "agent", Message: fmt.Sprintf("agent %s answers on %s (node %s, fabric %s)", st.AgentVersion, sock, st.Node, st.Fabric)}}
	if r := st.LastReport; st.Coordinator != "" && !r.OK && r.Error != "" {
		fs = append(fs, Finding{Check: "agent reports", Severity: Warn,
			Message: fmt.Sprintf("the agent's last report to %s failed: %s", st.Coordinator, r.Error),
			Fix:     "see the coordinator finding below; the agent retries by itself"})
	}
	if st.PeerServerError != "" {
		fs = append(fs, Finding{Check: "chunk server", Severity: Warn,
			Message: st.PeerServerError + ": the fabric's swarms go without this node",
			Fix:     "stop the process on that address (ss -ltnp names it), or set another peer_port or peer_addr in agent.toml; the agent serves as soon as it can listen"})
	}
	if st.Catalog.Error != "" || st.Catalog.Fetched.IsZero() {
		fs = append(fs, Finding{Check: "catalog copy", Severity: Warn,
			Message: fmt.Sprintf("the agent has no fresh catalog copy at %s (%s): the hooks cannot resolve models added since", st.Catalog.Path, orNone(st.Catalog.Error)),
			Fix:     "make the coordinator reachable from this node"})
	}
	if st.Catalog.GCHeld != "" {
		since := ""
		if !st.Catalog.GCHeldSince.IsZero() {
			since = " since " + st.Catalog.GCHeldSince.UTC().Format(time.RFC3339)
		}
		fs = append(fs, Finding{Check: "gc", Severity: Warn,
			Message: "this node's gc removes nothing" + since + ": " + st.Catalog.GCHeld,
			Fix:     "if the coordinator's catalog is the right one (a database restored or moved on purpose), run 'llmgw gc --trust': every node adopts it, gc_max_share still holds"})
	}
	return fs
}

func orNone(s string) string {
	if s == "" {
		return "never fetched"
	}
	return s
}

// checkTransport reports a coordinator reached over plain HTTP beyond
// loopback as an error: the coordinator can only be serving it with
// insecure_http = true, and anyone on the path can then read the node's
// token and rewrite the catalog that root fetches from.
func checkTransport(o Options) []Finding {
	u, err := url.Parse(o.Coordinator)
	if o.Coordinator == "" || err != nil || u.Scheme != "http" {
		return nil
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() || u.Hostname() == "localhost" {
		return nil
	}
	return []Finding{{Check: "coordinator TLS", Severity: Error,
		Message: o.Coordinator + " is plain HTTP beyond this host (the coordinator runs with insecure_http = true): anyone on the network can read this node's token and rewrite the catalog, which decides what root fetches and jobs load",
		Fix:     "give the coordinator tls_cert and tls_key in coordinator.toml and drop insecure_http; here set coordinator = \"https://...\" and tls_ca to the CA that signed the certificate"}}
}

func checkCoordinator(ctx context.Context, o Options) []Finding {
	if o.Coordinator == "" {
		return []Finding{{Check: "coordinator", Severity: Warn,
			Message: "agent.toml names no coordinator: this node reports to nobody, and placement does not know what it holds",
			Fix:     "set coordinator = \"http://HOST:8420\" in /etc/llmgw/agent.toml, then systemctl reload llmgw-agent"}}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c := &api.Client{BaseURL: o.Coordinator, TLSCA: o.TLSCA, UserAgent: "llmgw-doctor"}
	if err := c.Do(ctx, "GET", "/healthz", nil, nil); err != nil {
		return []Finding{{Check: "coordinator", Severity: Warn,
			Message: fmt.Sprintf("%v: this node's weights are not reported, and its catalog copy goes stale", err),
			Fix:     "start the coordinator (systemctl enable --now llmgw-coordinator on its host), set its listen address to one this node reaches, or correct coordinator in agent.toml"}}
	}
	fs := []Finding{{Check: "coordinator", Message: o.Coordinator + " answers"}}
	if o.TokenFile == "" {
		return append(fs, Finding{Check: "agent token", Severity: Warn,
			Message: "agent.toml names no token_file: the coordinator refuses this node's reports",
			Fix:     "make this node's own token with 'llmgw nodes token NODE --out /etc/llmgw/node.token' (an admin, mode 0600) and set token_file = \"/etc/llmgw/node.token\", or set munge_socket"})
	}
	tok, err := api.ReadToken(o.TokenFile)
	if err != nil {
		return append(fs, Finding{Check: "agent token", Severity: Warn,
			Message: fmt.Sprintf("%v: the coordinator refuses this node's reports", err),
			Fix:     "make this node's own token with 'llmgw nodes token NODE --out " + o.TokenFile + "' (an admin, mode 0600)"})
	}
	// An empty report is refused as invalid only after the token has been
	// accepted, so this asks about the token and records nothing.
	c.Token = tok
	err = c.Do(ctx, "POST", "/"+api.Version+"/reports", nil, nil)
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeInvalid:
		return append(fs, Finding{Check: "agent token", Message: "the coordinator accepts the token in " + o.TokenFile})
	case errors.As(err, &ae) && (ae.Code == api.CodeUnauthorized || ae.Code == api.CodeForbidden):
		return append(fs, Finding{Check: "agent token", Severity: Warn,
			Message: fmt.Sprintf("the coordinator refuses the token in %s: %s", o.TokenFile, ae.Message),
			Fix:     "make this node's own token again with 'llmgw nodes token NODE --out " + o.TokenFile + "' (an admin, mode 0600); the agent rereads it at each report"})
	case err == nil:
		return append(fs, Finding{Check: "agent token", Severity: Warn,
			Message: "the coordinator accepted an empty report; it is not the llmgw coordinator this llmgw expects",
			Fix:     "check the coordinator URL and versions"})
	}
	return append(fs, Finding{Check: "agent token", Severity: Warn, Message: fmt.Sprintf("could not check the token: %v", err)})
}

// checkCache checks that fetches can be written where the agent puts them,
// and that the place is node-local.
func checkCache(ctx context.Context, o Options) []Finding {
	dir := o.CacheDir
	if dir == "" {
		return nil
	}
	var fs []Finding
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fs = append(fs, Finding{Check: "cache dir", Severity: Warn,
			Message: dir + " does not exist yet; the agent creates it when it starts",
			Fix:     "start the agent (systemctl enable --now llmgw-agent)"})
		return fs
	case err != nil:
		return append(fs, Finding{Check: "cache dir", Severity: Error, Message: err.Error(), Fix: "make " + dir + " a directory root can write"})
	case !st.IsDir():
		return append(fs, Finding{Check: "cache dir", Severity: Error, Message: dir + " is not a directory", Fix: "set cache_dir in agent.toml to a directory"})
	}
	// Writable is tried, not inferred from the mode bits: a read-only
	// mount, a full disk's inodes or an ACL all say no only on a write.
	f, err := os.CreateTemp(dir, ".llmgw-doctor-*")
	if err != nil {
		return append(fs, Finding{Check: "cache dir", Severity: Error,
			Message: fmt.Sprintf("cannot write in %s: %v; every fetch fails, and with it every job whose model is not here", dir, err),
			Fix:     "run llmgw doctor as root (the agent's user); if it still fails, make " + dir + " writable or set cache_dir elsewhere"})
	}
	f.Close()
	os.Remove(f.Name())
	inv := scan.Scan(ctx, []string{dir}, scan.Options{DirTimeout: o.Timeout, MaxSkipped: -1})
	if len(inv.Dirs) == 1 && inv.Dirs[0].Shared {
		return append(fs, Finding{Check: "cache dir", Severity: Error,
			Message: fmt.Sprintf("%s is on a shared filesystem (%s): the lock that makes one fetch per source is node-local, so two nodes can write the same file at once", dir, inv.Dirs[0].FSType),
			Fix:     "set cache_dir in agent.toml to a node-local disk; put shared weights in weight_dirs instead"})
	}
	fstype := ""
	if len(inv.Dirs) == 1 {
		fstype = " (" + inv.Dirs[0].FSType + ")"
	}
	return append(fs, Finding{Check: "cache dir", Message: dir + " is writable and node-local" + fstype})
}

// checkHFCache checks the Hugging Face cache Hub models are fetched into,
// when agent.toml puts it elsewhere than the cache (inside it, the cache's
// checks are its): that it is a directory, whether root can write it (a
// read-only shared cache is fine, but only what it holds is had), and
// whether every user can (then any of them can change what the jobs of a
// Hub model load: llmgw never writes through a link one planted, but
// engines read whatever is there).
func checkHFCache(ctx context.Context, o Options) []Finding {
	dir := o.HFCache
	if dir == "" {
		return nil
	}
	if o.CacheDir != "" && strings.HasPrefix(dir, filepath.Clean(o.CacheDir)+"/") {
		return []Finding{{Check: "hf_cache", Message: dir + " is inside the cache: Hub models are fetched there, by the cache's rules"}}
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return []Finding{{Check: "hf_cache", Message: dir + " does not exist yet; the first Hub model a job asks for makes it"}}
	case err != nil:
		return []Finding{{Check: "hf_cache", Severity: Error, Message: err.Error(), Fix: "set hf_cache in agent.toml to a directory root can read"}}
	case !st.IsDir():
		return []Finding{{Check: "hf_cache", Severity: Error, Message: dir + " is not a directory; every job of a Hub model fails", Fix: "set hf_cache in agent.toml to a directory"}}
	}
	var fs []Finding
	if st.Mode().Perm()&0o002 != 0 {
		fs = append(fs, Finding{Check: "hf_cache", Severity: Warn,
			Message: dir + " is writable by every user: any of them can change what the jobs of a Hub model load (a snapshot's link, a blob); llmgw never writes through a link planted there, but engines read what is there",
			Fix:     "make it writable by root alone (chmod o-w), and give users their own caches, or accept that they share one"})
	}
	f, err := os.CreateTemp(dir, ".llmgw-doctor-*")
	if err != nil {
		return append(fs, Finding{Check: "hf_cache", Severity: Warn,
			Message: fmt.Sprintf("cannot write in %s: %v; a Hub model is had on this node only when this cache holds it, with refs/main naming its commit, and a job of any other fails", dir, err),
			Fix:     "run llmgw doctor as root; if the cache is a site's read-only one, that is how it is meant; else make it writable or set hf_cache elsewhere"})
	}
	f.Close()
	os.Remove(f.Name())
	where := "node-local"
	inv := scan.Scan(ctx, []string{dir}, scan.Options{DirTimeout: o.Timeout, MaxSkipped: -1})
	if len(inv.Dirs) == 1 {
		if inv.Dirs[0].Shared {
			where = "shared (" + inv.Dirs[0].FSType + "): each blob is fetched in the cache and moved in whole, and old revisions there are its admin's to remove"
		} else {
			where += " (" + inv.Dirs[0].FSType + ")"
		}
	}
	return append(fs, Finding{Check: "hf_cache", Message: dir + " is writable and " + where})
}

// checkFeatures asks the coordinator how its Slurm feature reconciler is
// doing. A reconciler that is off, failing or stopped breaks no job (a
// preference is never a filter), but jobs then stop landing where their
// weights are, so each is a warning with its fix. It says nothing when the
// coordinator cannot be asked: checkCoordinator has said why.
func checkFeatures(ctx context.Context, o Options) []Finding {
	if o.Coordinator == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c := &api.Client{BaseURL: o.Coordinator, UserAgent: "llmgw-doctor"}
	if o.TokenFile != "" {
		// Reads may need a token; the agent's is one the coordinator takes.
		c.Token, _ = api.ReadToken(o.TokenFile)
	}
	st, err := c.Status(ctx)
	if err != nil {
		return nil
	}
	return append(featureFindings(st.Features, time.Now()), fabricFindings(st)...)
}

// fabricFindings says whose word nodes' fabrics are (issue 24): Slurm's
// (fabric_features), or each agent's own, which root on any node can
// change to join another fabric's swarms and be offered there as a peer.
// With one fabric there is nothing to join; nothing from a coordinator
// that does not say.
func fabricFindings(st *api.Status) []Finding {
	const check = "fabrics"
	switch st.FabricsFrom {
	case api.FabricsFromSlurm:
		return []Finding{{Check: check, Message: "the coordinator takes each node's fabric from its Slurm node features (fabric_features)"}}
	case api.FabricsFromNodes:
		if len(st.Fabrics) <= 1 {
			return []Finding{{Check: check, Message: "one fabric; nodes' fabrics are their own word (agent.toml fabric), as nothing in coordinator.toml says which Slurm features are fabrics"}}
		}
		names := make([]string, len(st.Fabrics))
		for i, f := range st.Fabrics {
			names[i] = f.Fabric
		}
		return []Finding{{Check: check, Severity: Warn,
			Message: fmt.Sprintf("nodes report %d fabrics (%s), and each node's fabric is its own word (agent.toml fabric): root on a node can put it in another fabric's swarms, where it is offered as a peer across fabrics that are not connected", len(names), strings.Join(names, ", ")),
			Fix:     "name the Slurm features that are fabrics in /etc/llmgw/coordinator.toml (fabric_features = [\"ib-a\", \"ib-b\"]), so a node's fabric is Slurm's, then systemctl restart llmgw-coordinator"}}
	}
	return nil
}

// featureFindings judges the reconciler's state as of now.
func featureFindings(f *api.FeatureStatus, now time.Time) []Finding {
	const check = "features"
	switch {
	case f == nil:
		return []Finding{{Check: check, Severity: Warn,
			Message: "the coordinator keeps no Slurm node features: jobs get no preference for the nodes that hold their model",
			Fix:     "set features = true in /etc/llmgw/coordinator.toml on the slurmctld host (it runs scontrol update), then systemctl restart llmgw-coordinator"}}
	case f.Last == nil:
		return []Finding{{Check: check, Severity: Warn,
			Message: "the feature reconciler has not synced yet",
			Fix:     "wait one feature_interval; llmgw status shows its state"}}
	}
	interval := time.Duration(f.Interval * float64(time.Second))
	if f.Last.Error != "" {
		since := "never worked"
		if !f.LastOK.IsZero() {
			since = "last worked " + now.Sub(f.LastOK).Round(time.Second).String() + " ago"
		}
		return []Finding{{Check: check, Severity: Warn,
			Message: fmt.Sprintf("the feature reconciler fails (%s): %s; Slurm's llmgw features drift from what the nodes hold", since, f.Last.Error),
			Fix:     "check the coordinator's scontrol, sinfo and slurm_conf settings and that it runs as SlurmUser or root; llmgw features --dry-run shows the plan"}}
	}
	if interval > 0 && now.Sub(f.LastOK) > 3*interval {
		return []Finding{{Check: check, Severity: Warn,
			Message: fmt.Sprintf("the feature reconciler last ran %s ago, every %s expected: a scontrol reconfigure or slurmctld restart would leave the nodes without their llmgw features", now.Sub(f.LastOK).Round(time.Second), interval),
			Fix:     "check the coordinator's log (journalctl -u llmgw-coordinator); llmgw features runs a sync now"}}
	}
	msg := fmt.Sprintf("the feature reconciler is in step (%s ago, %d nodes)", now.Sub(f.LastOK).Round(time.Second), f.Last.Nodes)
	if f.Last.Drifted > 0 {
		msg += fmt.Sprintf("; its last run found %d node(s) drifted and rewrote them", f.Last.Drifted)
	}
	return []Finding{{Check: check, Message: msg}}
}
