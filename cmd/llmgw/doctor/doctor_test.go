package doctor

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/coordinator/store"
	"github.com/llmgw/llmgw/slurm"
)

// host lays out what a correctly set up node has on disk, in a temporary
// directory: the installed hooks, the SPANK plugin and its plugstack line,
// job_submit.lua beside slurm.conf.
type host struct {
	dir, conf, hooks, plugin string
}

func newHost(t *testing.T) host {
	t.Helper()
	d := t.TempDir()
	h := host{dir: d, conf: filepath.Join(d, "etc/slurm.conf"), hooks: filepath.Join(d, "libexec"), plugin: filepath.Join(d, "lib/llmgw_spank.so")}
	for _, name := range []string{"prolog", "epilog", "task-prolog"} {
		write(t, filepath.Join(h.hooks, name), "#!/bin/sh\nexec "+h.hooks+"/llmgw-hook "+name+"\n", 0o755)
	}
	write(t, h.plugin, "ELF", 0o644)
	write(t, filepath.Join(d, "etc/plugstack.conf.d/llmgw.conf"), "optional "+h.plugin+"\n", 0o644)
	write(t, filepath.Join(d, "etc/plugstack.conf"), "include "+d+"/etc/plugstack.conf.d/*.conf\n", 0o644)
	write(t, filepath.Join(d, "etc/job_submit.lua"), "-- llmgw's job_submit.lua\n", 0o644)
	return h
}

func write(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// good is the slurm.conf the snippet asks for, on this host's paths.
func (h host) good() slurm.Config {
	return slurm.Config{
		"prologflags":         "Alloc",
		"prolog":              h.hooks + "/prolog",
		"epilog":              h.hooks + "/epilog",
		"taskprolog":          h.hooks + "/task-prolog",
		"prologepilogtimeout": "1860",
		"plugstackconfig":     h.dir + "/etc/plugstack.conf",
		"jobsubmitplugins":    "lua",
		"schedulerparameters": "bf_continue",
	}
}

func (h host) opts() Options {
	return Options{HookDir: h.hooks, SpankPlugin: "/usr/lib/llmgw/llmgw_spank.so", FetchDeadline: 30 * time.Minute}
}

func with(c slurm.Config, kv ...string) slurm.Config {
	out := slurm.Config{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "<unset>" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

// worst returns the most severe finding of check, and all its messages.
func worst(fs []Finding, check string) (Severity, string) {
	sev, msgs := Severity(-1), []string{}
	for _, f := range fs {
		if f.Check == check {
			sev = max(sev, f.Severity)
			msgs = append(msgs, f.Message)
		}
	}
	return sev, strings.Join(msgs, " | ")
}

func TestCheckSettings(t *testing.T) {
	h := newHost(t)
	write(t, filepath.Join(h.dir, "site-prolog"), "#!/bin/sh\n/usr/bin/site-thing\n", 0o755)
	write(t, filepath.Join(h.dir, "site-chained"), "#!/bin/bash\n/usr/bin/site-thing\n"+h.hooks+"/prolog\n", 0o755)
	write(t, filepath.Join(h.dir, "noexec"), "#!/bin/sh\n# llmgw\n", 0o644)
	write(t, filepath.Join(h.dir, "root-only"), "#!/bin/sh\n# llmgw\n", 0o700)
	os.MkdirAll(filepath.Join(h.dir, "prolog.d"), 0o755)
	os.Symlink(h.hooks+"/prolog", filepath.Join(h.dir, "prolog.d/50-llmgw"))
	write(t, filepath.Join(h.dir, "etc/empty-plugstack.conf"), "# nothing\n", 0o644)
	write(t, filepath.Join(h.dir, "etc/missing-plugin.conf"), "required /nonexistent/llmgw_spank.so\n", 0o644)

	cases := []struct {
		name  string
		file  slurm.Config
		live  slurm.Config
		check string
		want  Severity
		say   string // in the messages of check
	}{
		{"all right", h.good(), nil, "", OK, ""},
		{"no Alloc", with(h.good(), "prologflags", "<unset>"), nil, "PrologFlags", Error, "no Alloc"},
		{"other flags only", with(h.good(), "prologflags", "DeferBatch,Serial"), nil, "PrologFlags", Error, "no Alloc"},
		{"Contain implies Alloc", with(h.good(), "prologflags", "Contain"), nil, "PrologFlags", OK, ""},
		{"Prolog unset", with(h.good(), "prolog", "<unset>"), nil, "Prolog", Error, "not set"},
		{"Prolog of the site", with(h.good(), "prolog", h.dir+"/site-prolog"), nil, "Prolog", Error, "does not run llmgw's prolog"},
		{"Prolog chaining llmgw's", with(h.good(), "prolog", h.dir+"/site-chained"), nil, "Prolog", OK, ""},
		{"Prolog glob with llmgw's", with(h.good(), "prolog", h.dir+"/prolog.d/*"), nil, "Prolog", OK, ""},
		{"Prolog missing here", with(h.good(), "prolog", "/nonexistent/prolog"), nil, "Prolog", Error, "drains the node"},
		{"Epilog not executable", with(h.good(), "epilog", h.dir+"/noexec"), nil, "Epilog", Error, "not executable"},
		{"TaskProlog missing", with(h.good(), "taskprolog", "<unset>"), nil, "TaskProlog", Error, "not set"},
		{"TaskProlog for root only", with(h.good(), "taskprolog", h.dir+"/root-only"), nil, "TaskProlog", Error, "cannot be read and run by the job's user"},
		{"timeout below the deadline", with(h.good(), "prologepilogtimeout", "600"), nil, "PrologEpilogTimeout", Error, "below the fetch deadline"},
		{"timeout just below the margin", with(h.good(), "prologepilogtimeout", "1829"), nil, "PrologEpilogTimeout", Error, "below"},
		{"timeout unset is unlimited", with(h.good(), "prologepilogtimeout", "<unset>"), nil, "PrologEpilogTimeout", OK, ""},
		{"timeout unlimited", with(h.good(), "prologepilogtimeout", "65534"), nil, "PrologEpilogTimeout", OK, ""},
		{"plugstack without llmgw", with(h.good(), "plugstackconfig", h.dir+"/etc/empty-plugstack.conf"), nil, "SPANK plugin", Error, "does not load llmgw_spank.so"},
		{"plugstack missing", with(h.good(), "plugstackconfig", h.dir+"/etc/none.conf"), nil, "SPANK plugin", Error, "does not load"},
		{"plugin file missing", with(h.good(), "plugstackconfig", h.dir+"/etc/missing-plugin.conf"), nil, "SPANK plugin", Error, "every job step on this host fails"},
		{"default plugstack beside slurm.conf", with(h.good(), "plugstackconfig", "<unset>"), nil, "SPANK plugin", OK, ""},
		{"no job_submit/lua", with(h.good(), "jobsubmitplugins", "<unset>"), nil, "job_submit", Warn, "not enabled"},
		{"lua among others", with(h.good(), "jobsubmitplugins", "require_timelimit,lua"), nil, "job_submit", OK, ""},
		// The controller runs another configuration than the file says.
		{"live lacks Alloc", h.good(), with(h.good(), "prologflags", "<unset>"), "PrologFlags", Error, "the running slurmctld"},
		{"live differs", h.good(), with(h.good(), "prolog", "/nonexistent/prolog"), "Prolog", Error, "/nonexistent/prolog (the running slurmctld)"},
		{"live differs, said so", h.good(), with(h.good(), "prolog", "/nonexistent/prolog"), "running config", Warn, "Prolog is"},
		{"live alone", nil, with(h.good(), "jobsubmitplugins", "<unset>"), "job_submit", Warn, "the running slurmctld"},
		{"file and live agree", h.good(), with(h.good(), "prologflags", "alloc"), "PrologFlags", OK, "and the running slurmctld"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := CheckSettings(tc.file, h.conf, tc.live, h.opts())
			if tc.check == "" {
				for _, f := range fs {
					if f.Severity != OK {
						t.Errorf("%s: %s %s", f.Check, f.Severity, f.Message)
					}
				}
				return
			}
			sev, msgs := worst(fs, tc.check)
			if sev != tc.want || !strings.Contains(msgs, tc.say) {
				t.Errorf("%s: %s %q; want %s with %q", tc.check, sev, msgs, tc.want, tc.say)
			}
			for _, f := range fs {
				if f.Severity != OK && f.Fix == "" {
					t.Errorf("%s: %s without a fix", f.Check, f.Message)
				}
			}
		})
	}
}

// TestJobSubmitLua: with lua enabled, the script must be beside slurm.conf
// and be llmgw's.
func TestJobSubmitLua(t *testing.T) {
	h := newHost(t)
	lua := filepath.Join(h.dir, "etc/job_submit.lua")
	os.Remove(lua)
	fs := CheckSettings(h.good(), h.conf, nil, h.opts())
	if sev, msg := worst(fs, "job_submit.lua"); sev != Warn || !strings.Contains(msg, lua) {
		t.Errorf("no job_submit.lua: %s %q", sev, msg)
	}
	write(t, lua, "function slurm_job_submit() end\n", 0o644)
	fs = CheckSettings(h.good(), h.conf, nil, h.opts())
	if sev, msg := worst(fs, "job_submit.lua"); sev != Warn || !strings.Contains(msg, "not llmgw's") {
		t.Errorf("a site's own job_submit.lua: %s %q", sev, msg)
	}
	fs = CheckSettings(with(h.good(), "jobsubmitplugins", "<unset>"), h.conf, nil, h.opts())
	if sev, _ := worst(fs, "job_submit.lua"); sev != -1 {
		t.Errorf("job_submit.lua checked although lua is not enabled")
	}
}

// TestJobSubmitBackupController: with a backup controller, llmgw doctor
// says that every controller needs job_submit.lua and the feature file, as
// slurm.conf names them (several SlurmctldHost lines, or the older
// ControlMachine and BackupController), and says nothing of it with one.
func TestJobSubmitBackupController(t *testing.T) {
	h := newHost(t)
	conf := filepath.Join(h.dir, "etc/slurm.conf")
	msgs := func(file string) string {
		write(t, conf, file, 0o644)
		c, err := slurm.ReadConf(conf)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, f := range CheckSettings(with(h.good(), kvs(c)...), conf, nil, h.opts()) {
			if f.Check == "job_submit.lua" {
				b.WriteString(f.Severity.String() + " " + f.Message + "\n")
			}
		}
		return b.String()
	}
	for _, tc := range []struct{ name, file, want string }{
		{"two SlurmctldHost lines", "SlurmctldHost=ctl1(10.0.0.1)\nSlurmctldHost=ctl2\n", "2 controllers (ctl1, ctl2)"},
		{"ControlMachine and BackupController", "ControlMachine=ctl1\nBackupController=ctl2\n", "2 controllers (ctl1, ctl2)"},
	} {
		if got := msgs(tc.file); !strings.Contains(got, tc.want) || !strings.Contains(got, "feature_file readable there") {
			t.Errorf("%s: job_submit.lua findings %q; want %q and the feature file", tc.name, got, tc.want)
		}
	}
	if got := msgs("SlurmctldHost=ctl1\n"); strings.Contains(got, "controllers") {
		t.Errorf("one controller: %q; want nothing said of others", got)
	}
	// The running slurmctld's view, as 22.05's scontrol prints it, when
	// slurm.conf cannot be read here.
	out, err := os.ReadFile("../../../slurm/testdata/22.05/scontrol-show-config.txt")
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, "SlurmctldHost[1]        = vm2(127.0.0.2)\n"...)
	live, err := slurm.ParseShowConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, f := range CheckSettings(nil, conf, with(live, "jobsubmitplugins", "lua"), h.opts()) {
		said = append(said, f.Message)
	}
	if got := strings.Join(said, "\n"); !strings.Contains(got, "2 controllers (vm, vm2)") {
		t.Errorf("from scontrol show config: %q; want both controllers named", got)
	}
}

// kvs flattens a Config for with.
func kvs(c slurm.Config) []string {
	var out []string
	for k, v := range c {
		out = append(out, k, v)
	}
	return out
}

// TestRunReadsFiles runs the whole doctor on a slurm.conf file, with scontrol
// absent (a Runner whose directory holds none).
func TestRunReadsFiles(t *testing.T) {
	h := newHost(t)
	var b strings.Builder
	for k, v := range with(h.good(), "prologflags", "Contain,X11") {
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	write(t, h.conf, b.String(), 0o644)
	o := h.opts()
	o.SlurmConf = h.conf
	o.Runner = &slurm.Runner{Dir: t.TempDir()}
	o.Socket = filepath.Join(t.TempDir(), "agent.sock")
	o.CacheDir = t.TempDir()
	fs := Run(context.Background(), o)
	for check, want := range map[string]Severity{
		"slurm.conf": OK, "slurmctld": Warn, "PrologFlags": OK, "Prolog": OK, "SPANK plugin": OK,
		"agent config": OK, "agent": Warn, "coordinator": Warn, "cache dir": OK,
	} {
		if sev, msg := worst(fs, check); sev != want {
			t.Errorf("%s: %s %q, want %s", check, sev, msg, want)
		}
	}
	if Broken(fs) {
		t.Errorf("Broken with only warnings: %+v", fs)
	}
}

func TestCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if sev, msg := worst(checkCache(ctx, Options{CacheDir: dir, Timeout: time.Second}), "cache dir"); sev != OK {
		t.Errorf("a writable local dir: %s %q", sev, msg)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the write test left %v behind", ents)
	}
	file := filepath.Join(dir, "f")
	write(t, file, "", 0o644)
	if sev, _ := worst(checkCache(ctx, Options{CacheDir: file, Timeout: time.Second}), "cache dir"); sev != Error {
		t.Errorf("a file as cache dir: %s, want error", sev)
	}
	if sev, _ := worst(checkCache(ctx, Options{CacheDir: filepath.Join(dir, "later"), Timeout: time.Second}), "cache dir"); sev != Warn {
		t.Errorf("a cache dir not made yet: %s, want warn", sev)
	}
}

// TestHFCache: the doctor looks at the Hugging Face cache Hub models are
// fetched into, when agent.toml puts it elsewhere than the cache: there,
// not a directory, writable by every user (any of them could change what
// jobs load), or one root cannot write (a read-only shared cache: only
// what it holds is had).
func TestHFCache(t *testing.T) {
	ctx := context.Background()
	cache, hf := t.TempDir(), t.TempDir()
	os.Chmod(hf, 0o755)
	o := Options{CacheDir: cache, HFCache: hf, Timeout: time.Second}
	if sev, msg := worst(checkHFCache(ctx, o), "hf_cache"); sev != OK || !strings.Contains(msg, hf) {
		t.Errorf("a root-only local hf_cache: %s %q", sev, msg)
	}
	if ents, _ := os.ReadDir(hf); len(ents) != 0 {
		t.Errorf("the write test left %v behind", ents)
	}
	os.Chmod(hf, 0o777)
	if sev, msg := worst(checkHFCache(ctx, o), "hf_cache"); sev != Warn || !strings.Contains(msg, "every user") {
		t.Errorf("a world-writable hf_cache: %s %q; want a warning saying any user can change what jobs load", sev, msg)
	}
	file := filepath.Join(hf, "f")
	write(t, file, "", 0o644)
	o.HFCache = file
	if sev, _ := worst(checkHFCache(ctx, o), "hf_cache"); sev != Error {
		t.Errorf("a file as hf_cache: %s, want error", sev)
	}
	o.HFCache = filepath.Join(cache, "hub")
	if sev, msg := worst(checkHFCache(ctx, o), "hf_cache"); sev != OK || !strings.Contains(msg, "inside the cache") {
		t.Errorf("the default hf_cache: %s %q", sev, msg)
	}
}

// TestCoordinator checks reachability and the token against a real
// coordinator on 127.0.0.1.
func TestCoordinator(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv, err := coordinator.New(ctx, coordinator.Config{}, coordinator.Tokens{Admin: "admin"}, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	// The node's own token, as `llmgw nodes token` makes it.
	made, err := (&api.Client{BaseURL: ts.URL, Token: "admin"}).NewNodeToken(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	tokens := t.TempDir()
	write(t, filepath.Join(tokens, "right"), made.Token+"\n", 0o600)
	write(t, filepath.Join(tokens, "wrong"), "wrong\n", 0o600)
	cases := []struct {
		name, url, token string
		check            string
		want             Severity
		say              string
	}{
		{"accepted", ts.URL, "right", "agent token", OK, "accepts"},
		{"rejected", ts.URL, "wrong", "agent token", Warn, "refuses the token"},
		{"no token file", ts.URL, "missing", "agent token", Warn, "no such file"},
		{"unreachable", "http://127.0.0.1:1", "right", "coordinator", Warn, "127.0.0.1:1"},
		{"not configured", "", "right", "coordinator", Warn, "names no coordinator"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := checkCoordinator(ctx, Options{Coordinator: tc.url, TokenFile: filepath.Join(tokens, tc.token), Timeout: 2 * time.Second})
			if sev, msg := worst(fs, tc.check); sev != tc.want || !strings.Contains(msg, tc.say) {
				t.Errorf("%s: %s %q; want %s with %q", tc.check, sev, msg, tc.want, tc.say)
			}
		})
	}
	// Asking about the token recorded nothing.
	nodes, err := db.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 0 {
		t.Errorf("the token check left %d node(s) in the store", len(nodes))
	}
}

func TestFeatureFindings(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ok := &api.FeatureSync{Time: now.Add(-10 * time.Second), Nodes: 4}
	for _, tc := range []struct {
		name string
		f    *api.FeatureStatus
		sev  Severity
		want string
	}{
		{"off", nil, Warn, "keeps no Slurm node features"},
		{"not yet", &api.FeatureStatus{Interval: 30}, Warn, "has not synced yet"},
		{"failing", &api.FeatureStatus{Interval: 30, LastOK: now.Add(-time.Hour), Last: &api.FeatureSync{Error: "sinfo: exit status 1"}}, Warn, "fails (last worked 1h0m0s ago): sinfo: exit status 1"},
		{"never worked", &api.FeatureStatus{Interval: 30, Last: &api.FeatureSync{Error: "scontrol: permission denied"}}, Warn, "never worked"},
		{"stopped", &api.FeatureStatus{Interval: 30, LastOK: now.Add(-5 * time.Minute), Last: ok}, Warn, "last ran 5m0s ago, every 30s expected"},
		{"in step", &api.FeatureStatus{Interval: 30, LastOK: now.Add(-10 * time.Second), Last: ok}, OK, "in step (10s ago, 4 nodes)"},
		{"drift repaired", &api.FeatureStatus{Interval: 30, LastOK: now.Add(-10 * time.Second), Last: &api.FeatureSync{Nodes: 4, Drifted: 2}}, OK, "found 2 node(s) drifted"},
	} {
		fs := featureFindings(tc.f, now)
		if len(fs) != 1 || fs[0].Severity != tc.sev || !strings.Contains(fs[0].Message, tc.want) {
			t.Errorf("%s: %+v; want %s containing %q", tc.name, fs, tc.sev, tc.want)
		}
		if tc.sev == Warn && fs[0].Fix == "" {
			t.Errorf("%s: a warning without a fix", tc.name)
		}
	}
}

// TestFabricFindings: the doctor says whose word nodes' fabrics are; with
// more than one fabric and no fabric_features, a warning with its fix.
func TestFabricFindings(t *testing.T) {
	two := []api.FabricNodes{{Fabric: "ib-a"}, {Fabric: "ib-b"}}
	for _, tc := range []struct {
		name string
		st   api.Status
		sev  Severity
		want string
	}{
		{"from Slurm", api.Status{FabricsFrom: api.FabricsFromSlurm, Fabrics: two}, OK, "from its Slurm node features"},
		{"nodes' word, two fabrics", api.Status{FabricsFrom: api.FabricsFromNodes, Fabrics: two}, Warn, "2 fabrics (ib-a, ib-b), and each node's fabric is its own word"},
		{"nodes' word, one fabric", api.Status{FabricsFrom: api.FabricsFromNodes, Fabrics: two[:1]}, OK, "one fabric; nodes' fabrics are their own word"},
	} {
		fs := fabricFindings(&tc.st)
		if len(fs) != 1 || fs[0].Severity != tc.sev || !strings.Contains(fs[0].Message, tc.want) {
			t.Errorf("%s: %+v; want %s containing %q", tc.name, fs, tc.sev, tc.want)
		}
		if tc.sev == Warn && !strings.Contains(fs[0].Fix, "fabric_features") {
			t.Errorf("%s: the fix does not name fabric_features: %q", tc.name, fs[0].Fix)
		}
	}
	if fs := fabricFindings(&api.Status{}); fs != nil {
		t.Errorf("a coordinator that does not say: %+v, want nothing", fs)
	}
}

// TestHookOrder: llmgw's Prolog and Epilog beside a site's scripts. The
// doctor lists them in the order slurmd runs them (a directory glob in
// reverse byte order, Prolog= lines in turn from 24.05; docs/slurm/
// behaviour.md §10), is content when llmgw's runs last, warns when a site
// script it can see would run after it, says plainly when llmgw's is all
// there is, and calls a glob that matches nothing an error: slurmd fails
// the Prolog and drains the node.
func TestHookOrder(t *testing.T) {
	h := newHost(t)
	site := func(p string) { write(t, filepath.Join(h.dir, p), "#!/bin/sh\n/usr/sbin/site-check\n", 0o755) }
	link := func(dir, name, hook string) {
		os.MkdirAll(filepath.Join(h.dir, dir), 0o755)
		if err := os.Symlink(h.hooks+"/"+hook, filepath.Join(h.dir, dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// llmgw's link sorts first, so it runs last.
	site("last.d/90-health")
	site("last.d/10-gpu")
	link("last.d", "00-llmgw", "prolog")
	// A site script sorts before llmgw's link, so it runs after it.
	site("early.d/00-health")
	link("early.d", "50-llmgw", "prolog")
	site("epilog.d/00-cleanup")
	link("epilog.d", "50-llmgw", "epilog")
	os.MkdirAll(filepath.Join(h.dir, "empty.d"), 0o755)
	site("site.d/50-health")

	v2211 := slurm.Version{Major: 24, Minor: 11, Micro: 5}
	cases := []struct {
		name    string
		version slurm.Version
		file    slurm.Config
		check   string
		want    Severity
		say     string
	}{
		{"llmgw's alone", v2211, h.good(), "Prolog", OK, "runs llmgw's prolog and nothing else"},
		{"llmgw's last in the glob", v2211, with(h.good(), "prolog", h.dir+"/last.d/*"), "Prolog", OK, "last, after the site's (in this order: 90-health, 10-gpu, 00-llmgw)"},
		{"a site script after llmgw's", v2211, with(h.good(), "prolog", h.dir+"/early.d/*"), "Prolog", Warn, "00-health runs after llmgw's prolog"},
		{"the site's epilog after llmgw's gc", v2211, with(h.good(), "epilog", h.dir+"/epilog.d/*"), "Epilog", Warn, "llmgw's gc then runs before"},
		{"a glob matching nothing", v2211, with(h.good(), "prolog", h.dir+"/empty.d/*"), "Prolog", Error, "matches no file here"},
		{"an added line after the site's", v2211, with(h.good(), "prolog", h.dir+"/site.d/*", "prolog[1]", h.hooks+"/prolog"), "Prolog", OK, "in this order: 50-health, prolog"},
		{"an added line before the site's", v2211, with(h.good(), "prolog", h.hooks+"/prolog", "prolog[1]", h.dir+"/site.d/*"), "Prolog", Warn, "50-health runs after llmgw's prolog"},
		// 22.05 runs the last line alone: the site's.
		{"an added line on 22.05", slurm.Version{Major: 22, Minor: 5, Micro: 8}, with(h.good(), "prolog", h.dir+"/site.d/*", "prolog[1]", h.hooks+"/prolog"), "Prolog", OK, "runs llmgw's prolog and nothing else"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := CheckSettingsOf(tc.version, tc.file, h.conf, nil, h.opts())
			sev, msgs := worst(fs, tc.check)
			if sev != tc.want || !strings.Contains(msgs, tc.say) {
				t.Errorf("%s: %s %q; want %s with %q", tc.check, sev, msgs, tc.want, tc.say)
			}
		})
	}
}
