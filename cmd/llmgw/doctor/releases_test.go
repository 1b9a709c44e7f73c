package doctor

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/slurm"
)

// The fixtures scripts/capture-fixtures captured from real slurmctlds of
// each release, one directory each.
var fixtures = filepath.Join("..", "..", "..", "slurm", "testdata")

func releaseDirs(t *testing.T) []string {
	t.Helper()
	vs, err := filepath.Glob(filepath.Join(fixtures, "*", "version.txt"))
	if err != nil || len(vs) < 3 {
		t.Fatalf("want fixtures of three releases or more in %s/*/version.txt, found %d (%v); run scripts/capture-fixtures", fixtures, len(vs), err)
	}
	for i := range vs {
		vs[i] = filepath.Dir(vs[i])
	}
	return vs
}

func releaseOf(t *testing.T, dir string) slurm.Version {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "version.txt"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := slurm.ParseVersion(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// captureHooks lays out, in a temporary directory, the hooks the captured
// configurations name under /var/tmp/llmgw-fixtures/hooks (llmgw's prolog
// and epilog, a site's prolog, prolog.d/ and epilog.d/ with links to
// llmgw's, named 00-llmgw so that slurmd runs it last), and returns it; showConfig puts it in place of the captured
// paths.
func captureHooks(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "hooks")
	for _, name := range []string{"prolog", "epilog", "task-prolog"} {
		write(t, filepath.Join(d, name), "#!/bin/sh\nexec /usr/libexec/llmgw/llmgw-hook "+name+"\n", 0o755)
	}
	write(t, filepath.Join(d, "site-prolog"), "#!/bin/sh\n/usr/bin/site-thing\n", 0o755)
	write(t, filepath.Join(d, "prolog.d/10-site"), "#!/bin/sh\n/usr/bin/site-thing\n", 0o755)
	for _, l := range [][2]string{{"prolog", "prolog.d/00-llmgw"}, {"epilog", "epilog.d/00-llmgw"}} {
		os.MkdirAll(filepath.Dir(filepath.Join(d, l[1])), 0o755)
		if err := os.Symlink(filepath.Join(d, l[0]), filepath.Join(d, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// showConfig parses a captured `scontrol show config`, its hook paths moved
// to hooks; nil when the release refused that configuration.
func showConfig(t *testing.T, dir, variant, hooks string) slurm.Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "scontrol-show-config-"+variant+".txt"))
	if os.IsNotExist(err) {
		if _, rerr := os.Stat(filepath.Join(dir, "scontrol-show-config-"+variant+".refused")); rerr == nil {
			return nil
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer("/var/tmp/llmgw-fixtures-host/c/hooks", hooks, "/var/tmp/llmgw-fixtures/hooks", hooks).Replace(string(b))
	c, err := slurm.ParseShowConfig([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDoctorEveryRelease runs the Slurm checks on each release's running
// configuration as slurmctld printed it: one Prolog, two Prolog= lines
// (24.05 and later print Prolog[0], Prolog[1]), a prolog directory glob
// with llmgw's link inside, and PrologTimeout=60 beside
// PrologEpilogTimeout=600 (25.05 and later; 26.05 then shows no
// PrologEpilogTimeout at all).
func TestDoctorEveryRelease(t *testing.T) {
	hooks := captureHooks(t)
	h := newHost(t)
	o := Options{HookDir: hooks, SpankPlugin: "/usr/lib/llmgw/llmgw_spank.so", FetchDeadline: 5 * time.Minute}
	for _, dir := range releaseDirs(t) {
		rel := releaseOf(t, dir)
		for _, tc := range []struct {
			variant string
			check   string
			want    Severity
			say     string
		}{
			{"base", "Prolog", OK, "runs llmgw's prolog"},
			{"base", "Epilog", OK, "runs llmgw's epilog"},
			{"base", "PrologEpilogTimeout", OK, "PrologEpilogTimeout=600"},
			{"multi", "Prolog", OK, "runs llmgw's prolog"},
			{"multi", "Epilog", OK, "runs llmgw's epilog"},
			{"multi", "PrologFlags", OK, "alloc,contain"},
			{"glob", "Prolog", OK, "prolog.d/* runs llmgw's prolog last, after the site's (in this order: 10-site, 00-llmgw)"},
			{"timeouts", "PrologEpilogTimeout", Error, "PrologTimeout=60 in the running slurmctld is below the fetch deadline"},
		} {
			t.Run(rel.Release()+"/"+tc.variant+"/"+tc.check, func(t *testing.T) {
				live := showConfig(t, dir, tc.variant, hooks)
				if live == nil {
					if tc.variant == "timeouts" && !rel.AtLeast(25, 5) {
						return // PrologTimeout came in 25.05; older slurmctlds refuse it
					}
					t.Fatalf("%s refused the %s configuration", rel, tc.variant)
				}
				// The plugstack is the test host's: the captured one is empty.
				live["plugstackconfig"] = h.dir + "/etc/plugstack.conf"
				fs := CheckSettingsOf(rel, nil, h.conf, live, o)
				sev, msgs := worst(fs, tc.check)
				if sev != tc.want || !strings.Contains(msgs, tc.say) {
					t.Errorf("%s: %s %q; want %s with %q", tc.check, sev, msgs, tc.want, tc.say)
				}
			})
		}
	}
}

// TestPrologFlagsEveryRelease: for each PrologFlags=FLAG, what slurmctld
// showed (prologflags.txt: Alloc added or not) is what doctor concludes,
// both from the running controller and from the slurm.conf line alone.
// Serial is a warning either way.
func TestPrologFlagsEveryRelease(t *testing.T) {
	h := newHost(t)
	for _, dir := range releaseDirs(t) {
		rel := releaseOf(t, dir)
		f, err := os.Open(filepath.Join(dir, "prologflags.txt"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		n := 0
		for sc.Scan() {
			flag, shown, _ := strings.Cut(sc.Text(), "\t")
			if strings.HasPrefix(shown, "refused") {
				continue
			}
			n++
			live, err := slurm.ParseShowConfig([]byte(shown + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			v, _ := live.Get("PrologFlags")
			alloc := strings.Contains(","+strings.ToLower(v)+",", ",alloc,")
			want := Error
			if alloc {
				want = OK
			}
			for _, side := range []struct {
				name       string
				file, live slurm.Config
			}{
				{"running", nil, live},
				{"slurm.conf", slurm.Config{"prologflags": flag}, nil},
			} {
				t.Run(rel.Release()+"/"+flag+"/"+side.name, func(t *testing.T) {
					fs := checkPrologFlags(slurmView{confPath: h.conf, file: side.file, live: side.live, version: rel})
					got := Severity(-1)
					for _, f := range fs {
						if f.Check == "PrologFlags" && !strings.Contains(f.Message, "Serial") {
							got = max(got, f.Severity)
						}
					}
					if got != want {
						t.Errorf("PrologFlags=%s (slurmctld showed %q): %s, want %s; %+v", flag, v, got, want, fs)
					}
					warned := false
					for _, f := range fs {
						warned = warned || f.Severity == Warn && strings.Contains(f.Message, "has Serial")
					}
					if warned != (flag == "Serial") {
						t.Errorf("PrologFlags=%s: a warning about Serial is %v, want %v: %+v", flag, warned, flag == "Serial", fs)
					}
				})
			}
		}
		f.Close()
		if n < 6 {
			t.Errorf("%s/prologflags.txt: only %d flags captured", dir, n)
		}
	}
}

// TestSpankPluginRelease: the plugin built against each release's own
// headers (inside that release's root, by scripts/capture-fixtures) loads
// there and nowhere else, and doctor says so, reading the release from a
// scontrol that prints what that release's scontrol --version printed.
func TestSpankPluginRelease(t *testing.T) {
	dirs := releaseDirs(t)
	for _, built := range dirs {
		for _, runs := range dirs {
			name := "built " + filepath.Base(built) + ", runs " + filepath.Base(runs)
			t.Run(name, func(t *testing.T) {
				h := newHost(t)
				so, err := os.ReadFile(filepath.Join(built, "llmgw_spank.so"))
				if err != nil {
					t.Fatal(err)
				}
				write(t, h.plugin, string(so), 0o644)
				version, _ := filepath.Abs(filepath.Join(runs, "version.txt"))
				bin := t.TempDir()
				write(t, filepath.Join(bin, "scontrol"), "#!/bin/sh\n[ \"$*\" = --version ] && exec cat '"+version+"'\necho 'scontrol: error: Unable to contact slurm controller' >&2; exit 1\n", 0o755)
				var b strings.Builder
				for k, v := range h.good() {
					b.WriteString(k + "=" + v + "\n")
				}
				write(t, h.conf, b.String(), 0o644)
				o := h.opts()
				o.SlurmConf, o.SlurmConfFromEnv = h.conf, true
				o.Runner = &slurm.Runner{Dir: bin}
				o.Socket = filepath.Join(t.TempDir(), "agent.sock")
				o.Timeout = 2 * time.Second
				sev, msg := worst(Run(context.Background(), o), "SPANK plugin")
				if filepath.Base(built) == filepath.Base(runs) {
					if sev != OK || !strings.Contains(msg, "built for Slurm "+filepath.Base(runs)) {
						t.Errorf("same release: %s %q", sev, msg)
					}
					return
				}
				if sev != Error || !strings.Contains(msg, "was built for Slurm "+filepath.Base(built)) {
					t.Errorf("another release: %s %q; want an error naming %s", sev, msg, filepath.Base(built))
				}
				for _, f := range Run(context.Background(), o) {
					if f.Check == "SPANK plugin" && f.Severity == Error && !strings.Contains(f.Fix, "make spank SLURM=") {
						t.Errorf("the fix does not name the command: %q", f.Fix)
					}
					// The package for the running release, not the plugin's.
					if pkg := "apt-get install llmgw-spank-slurm" + filepath.Base(runs); f.Check == "SPANK plugin" && f.Severity == Error && !strings.Contains(f.Fix, pkg) {
						t.Errorf("the fix does not name %q: %q", pkg, f.Fix)
					}
				}
			})
		}
	}
}

// TestConfigless: a node with no /etc/slurm/slurm.conf, whose slurmd runs
// the copy it fetched from slurmctld, is checked on that copy.
func TestConfigless(t *testing.T) {
	h := newHost(t)
	cache := filepath.Join(t.TempDir(), "run/slurm/conf")
	var b strings.Builder
	for k, v := range h.good() {
		b.WriteString(k + "=" + v + "\n")
	}
	write(t, filepath.Join(cache, "slurm.conf"), b.String(), 0o644)
	o := h.opts()
	o.SlurmConf = filepath.Join(t.TempDir(), "etc/slurm/slurm.conf") // absent
	o.ConfCache = []string{filepath.Join(t.TempDir(), "none/slurm.conf"), filepath.Join(cache, "slurm.conf")}
	o.Runner = &slurm.Runner{Dir: t.TempDir()}
	o.Socket = filepath.Join(t.TempDir(), "agent.sock")
	fs := Run(context.Background(), o)
	if sev, msg := worst(fs, "slurm.conf"); sev != OK || !strings.Contains(msg, "configless") {
		t.Errorf("slurm.conf: %s %q; want the cached copy read", sev, msg)
	}
	if sev, msg := worst(fs, "Prolog"); sev != OK {
		t.Errorf("Prolog: %s %q", sev, msg)
	}
	// Named by SLURM_CONF, a missing file is an error, not configless.
	o.SlurmConfFromEnv = true
	if sev, _ := worst(Run(context.Background(), o), "slurm.conf"); sev != Error {
		t.Errorf("SLURM_CONF naming a missing file: %s, want error", sev)
	}
}

// TestTimeoutDiffers: a file and a controller that disagree on the Prolog
// timeout are named by the key that decides it.
func TestTimeoutDiffers(t *testing.T) {
	h := newHost(t)
	fs := CheckSettings(with(h.good(), "prologepilogtimeout", "60"), h.conf, h.good(), h.opts())
	if _, d := worst(fs, "running config"); !strings.Contains(d, `PrologEpilogTimeout is "60" in`) {
		t.Errorf("running config: %q", d)
	}
	fs = CheckSettings(with(h.good(), "prologtimeout", "60"), h.conf, h.good(), h.opts())
	if sev, msg := worst(fs, "PrologEpilogTimeout"); sev != Error || !strings.Contains(msg, "PrologTimeout=60 in "+h.conf) {
		t.Errorf("PrologTimeout in the file: %s %q", sev, msg)
	}
}

// TestSeveralPrologLines: slurm.conf with llmgw's Prolog= line before a
// site's. From 24.05 both run, in turn, so the site's runs after llmgw's;
// before, only the last one does, and llmgw's never runs.
func TestSeveralPrologLines(t *testing.T) {
	h := newHost(t)
	write(t, filepath.Join(h.dir, "site-prolog"), "#!/bin/sh\n/usr/bin/site-thing\n", 0o755)
	write(t, h.conf, "Prolog="+h.hooks+"/prolog\nProlog="+h.dir+"/site-prolog\n", 0o644)
	file, err := slurm.ReadConf(h.conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v    slurm.Version
		want Severity
		say  string
	}{
		{slurm.Version{Major: 24, Minor: 11, Micro: 5}, Warn, "site-prolog runs after llmgw's prolog"},
		{slurm.Version{Major: 22, Minor: 5, Micro: 8}, Error, "site-prolog (" + h.conf + ") does not run llmgw's prolog"},
	} {
		sev, msg := worst(CheckSettingsOf(tc.v, with(h.good(), "prolog", file["prolog"], "prolog[1]", file["prolog[1]"]), h.conf, nil, h.opts()), "Prolog")
		if sev != tc.want || !strings.Contains(msg, tc.say) {
			t.Errorf("Slurm %s: %s %q; want %s with %q", tc.v, sev, msg, tc.want, tc.say)
		}
	}
}
