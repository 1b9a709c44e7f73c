package slurm

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseShowConfig(t *testing.T) {
	out, err := os.ReadFile("testdata/22.05/scontrol-show-config.txt")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseShowConfig(out)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"PrologFlags":           "Alloc",
		"prolog":                "/work/wt/ship/scripts/slurm/prolog",
		"Epilog":                "/work/wt/ship/scripts/slurm/epilog",
		"TaskProlog":            "/work/wt/ship/scripts/slurm/task-prolog",
		"PrologEpilogTimeout":   "65534",
		"PlugStackConfig":       "/var/tmp/llmgw-dev-cluster/plugstack.conf",
		"SchedulerParameters":   "batch_sched_delay=0",
		"AuthInfo":              "socket=/var/tmp/llmgw-dev-cluster/munge/munge.socket.2",
		"UnkillableStepTimeout": "60 sec",
	} {
		if got, _ := c.Get(key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	// "(null)" is unset.
	if v, ok := c.Get("JobSubmitPlugins"); ok || v != "" {
		t.Errorf("JobSubmitPlugins = %q, %v; scontrol said (null)", v, ok)
	}
	if _, ok := c["slurmctld(primary) at vm is up"]; ok {
		t.Error("the status line was taken for a setting")
	}
	if len(c) < 150 {
		t.Errorf("only %d settings parsed; scontrol printed about 190", len(c))
	}
	if _, err := ParseShowConfig([]byte("scontrol: error: Unable to contact slurm controller\n")); err == nil {
		t.Error("an error message parsed as a configuration")
	}
}

func TestReadConf(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("conf.d/hooks.conf", "Prolog=/usr/libexec/llmgw/prolog # the hook\nprologflags=Alloc,Contain\n")
	conf := write("slurm.conf", `# a comment
ClusterName=c
PrologFlags=Contain
include conf.d/*.conf
JobSubmitPlugins="lua,require_timelimit"
SchedulerParameters=batch_sched_delay=0,\
bf_interval=30
NodeName=n[1-2] CPUs=2 Prolog=/not/a/setting
PartitionName=debug Nodes=n[1-2] Default=YES
`)
	c, err := ReadConf(conf)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		"clustername":         "c",
		"prologflags":         "Alloc,Contain", // the include comes later and wins
		"prolog":              "/usr/libexec/llmgw/prolog",
		"jobsubmitplugins":    "lua,require_timelimit",
		"schedulerparameters": "batch_sched_delay=0,bf_interval=30",
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("ReadConf = %v\nwant %v", c, want)
	}
	if _, err := ReadConf(filepath.Join(dir, "missing.conf")); !os.IsNotExist(err) {
		t.Errorf("ReadConf of a missing file: %v, want not-exist", err)
	}
	write("bad.conf", "include /nonexistent/file.conf\n")
	if _, err := ReadConf(filepath.Join(dir, "bad.conf")); err == nil {
		t.Error("a missing include (not a glob) was no error")
	}
}

// TestConfLines: slurm.conf lines as Slurm's parser reads them. Each rule
// was checked by appending such lines to a copy of the dev cluster's
// slurm.conf and running 22.05's `scontrol show hostnames` on it: its parse
// errors quote the joined line (`line 51: " TCPTimeout=9"` after a line
// `MessageTimeout=17 \` with a tab after the backslash), a comment's
// backslash continued nothing, `DebugFlags=\#x` was refused as "#x" and
// `DebugFlags=Gres\\` as "Gres\".
func TestConfLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"continued: the next line appended as it is", "SchedulerParameters=batch_sched_delay=0,\\\nbf_interval=30\n",
			[]string{"SchedulerParameters=batch_sched_delay=0,bf_interval=30"}},
		// Slurm refuses this file ("Parse error ... '  bf_interval=30'"):
		// the value ends at the whitespace the continuation kept.
		{"continued: leading whitespace kept", "SchedulerParameters=a,\\\n  b=1\n",
			[]string{"SchedulerParameters=a,  b=1"}},
		{"whitespace after the backslash", "NodeName=n1 \\ \t\n  CPUs=2\n", []string{"NodeName=n1   CPUs=2"}},
		{"a comment ends the line, the backslash in it too", "A=1 # c\\\nB=2\n", []string{"A=1", "B=2"}},
		{"an escaped # is a #", "DebugFlags=\\#x\n", []string{"DebugFlags=#x"}},
		{"an even run of backslashes does not continue", "A=x\\\\\nB=2\n", []string{"A=x\\", "B=2"}},
		{"a continuation on the last line", "A=1 \\", []string{"A=1"}},
		{"blank and comment lines", "\n  # x\n\t\n", nil},
	} {
		if got := confLines([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: confLines(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
	pairs := confPairs(`NodeName=n[1-2] Features="a b" CPUs = 2 Weight+=3 Bad Gres=gpu:1`)
	want := []confPair{{"NodeName", "n[1-2]"}, {"Features", "a b"}, {"CPUs", "2"}, {"Weight", "3"}}
	if !reflect.DeepEqual(pairs, want) {
		t.Errorf("confPairs = %q, want %q (up to the first text that is no pair)", pairs, want)
	}
	c, _ := ParseConf([]byte("SchedulerParameters=a,\\\n  b=1\nPrologFlags=Alloc   \n"))
	if want := (Config{"schedulerparameters": "a,", "prologflags": "Alloc"}); !reflect.DeepEqual(c, want) {
		t.Errorf("ParseConf = %v, want %v", c, want)
	}
}

func TestReadPlugstack(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "plugstack.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "plugstack.conf"), []byte("required /usr/lib/x.so a=1 b\ninclude "+dir+"/plugstack.conf.d/*.conf\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "plugstack.conf.d", "llmgw.conf"), []byte("# llmgw\noptional /usr/lib/llmgw/llmgw_spank.so\n"), 0o644)
	ps, err := ReadPlugstack(filepath.Join(dir, "plugstack.conf"))
	if err != nil {
		t.Fatal(err)
	}
	want := []SpankPlugin{
		{Required: true, Path: "/usr/lib/x.so", Args: []string{"a=1", "b"}, File: filepath.Join(dir, "plugstack.conf")},
		{Path: "/usr/lib/llmgw/llmgw_spank.so", Args: []string{}, File: filepath.Join(dir, "plugstack.conf.d", "llmgw.conf")},
	}
	if !reflect.DeepEqual(ps, want) {
		t.Errorf("ReadPlugstack = %+v\nwant %+v", ps, want)
	}
	// Debian's own file, with an empty plugstack.conf.d: no plugins, no error.
	os.Remove(filepath.Join(dir, "plugstack.conf.d", "llmgw.conf"))
	os.WriteFile(filepath.Join(dir, "plugstack.conf"), []byte("include "+dir+"/plugstack.conf.d/*.conf\n"), 0o644)
	if ps, err := ReadPlugstack(filepath.Join(dir, "plugstack.conf")); err != nil || len(ps) != 0 {
		t.Errorf("empty plugstack.conf.d: %v, %v; want none, nil", ps, err)
	}
	if _, _, err := ParsePlugstack([]byte("optinal /x.so\n")); err == nil {
		t.Error("a misspelt plugstack line was accepted")
	}
}

// TestReadConfSeveralPrologs: from 24.05 every Prolog= line of slurm.conf
// and its includes is run, in order; none replaces another.
func TestReadConfSeveralPrologs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "slurm.conf"), []byte("Prolog=/site/prolog\nInclude llmgw.conf\nEpilog=/site/epilog\nPrologTimeout=60\nPrologEpilogTimeout=600\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "llmgw.conf"), []byte("Prolog=/usr/libexec/llmgw/prolog\nProlog=/etc/slurm/prolog.d/*\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ReadConf(filepath.Join(dir, "slurm.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.All("Prolog"), []string{"/site/prolog", "/usr/libexec/llmgw/prolog", "/etc/slurm/prolog.d/*"}; !reflect.DeepEqual(got, want) {
		t.Errorf("All(Prolog) = %q, want %q", got, want)
	}
	if got, want := c.All("epilog"), []string{"/site/epilog"}; !reflect.DeepEqual(got, want) {
		t.Errorf("All(Epilog) = %q, want %q", got, want)
	}
	if v, k := c.PrologTimeout(); v != "60" || k != "PrologTimeout" {
		t.Errorf("PrologTimeout() = %q from %s, want 60 from PrologTimeout", v, k)
	}
}

func TestParseVersion(t *testing.T) {
	for _, dir := range releaseDirs(t) {
		v, err := ParseVersion(readFixture(t, dir, "version.txt"))
		if err != nil || v.Release() != filepath.Base(dir) {
			t.Errorf("%s/version.txt: %v, %v; want release %s", dir, v, err, filepath.Base(dir))
		}
	}
	if v, err := ParseVersion([]byte("slurm 25.05.0-0rc1\n")); err != nil || v != (Version{25, 5, 0}) {
		t.Errorf("a pre-release: %v, %v", v, err)
	}
	for _, bad := range []string{"", "scontrol: fatal: Could not establish a configuration source", "slurm 24"} {
		if _, err := ParseVersion([]byte(bad)); err == nil {
			t.Errorf("ParseVersion(%q) took it for a version", bad)
		}
	}
}

func TestIgnoresPreferValidation(t *testing.T) {
	for _, tc := range []struct {
		params string
		want   bool
	}{
		{"", false},
		{"(null)", false},
		{"bf_continue,batch_sched_delay=0", false},
		{"bf_continue,ignore_prefer_validation", true},
		{"Ignore_Prefer_Validation", true},
		{"no_ignore_prefer_validation_here", false},
	} {
		c, err := ParseShowConfig([]byte("Configuration data as of 2026-12-04T10:00:00\nSchedulerParameters     = " + tc.params + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := IgnoresPreferValidation(c); got != tc.want {
			t.Errorf("SchedulerParameters=%s: IgnoresPreferValidation = %v, want %v", tc.params, got, tc.want)
		}
	}
}
