package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/agent"
	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/cmd/llmgw/doctor"
	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/evict"
	"github.com/llmgw/llmgw/weights/scan"
)

// The configuration files the package installs in /etc/llmgw are read by the
// same loaders as the daemons use, so a key renamed in a Config struct, or a
// documented default that no longer parses, fails here rather than on an
// admin's node after an upgrade.

const shippedDir = "../../packaging/etc/llmgw"

// commentedKey matches a documented setting left at its default:
// "#cache_dir = ...". Prose comments have a space after the '#'.
var commentedKey = regexp.MustCompile(`(?m)^#([a-z_]+) = `)

// tomlKeys lists the TOML keys of a Config struct, the ones a file may set.
func tomlKeys(t *testing.T, v any) []string {
	t.Helper()
	var keys []string
	typ := reflect.TypeOf(v)
	for i := 0; i < typ.NumField(); i++ {
		tag := typ.Field(i).Tag.Get("toml")
		if tag == "" {
			t.Fatalf("%s.%s has no toml tag; give it one (or \"-\")", typ, typ.Field(i).Name)
		}
		if tag != "-" {
			keys = append(keys, tag)
		}
	}
	return keys
}

// uncommented writes a copy of the file at path with every documented
// default set, to check that the documentation parses too.
func uncommented(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, commentedKey.ReplaceAll(b, []byte("$1 = ")), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkDocumented fails for every key of the struct the file does not
// mention as a setting, commented or not.
func checkDocumented(t *testing.T, path string, keys []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !regexp.MustCompile(`(?m)^#?` + k + ` = `).Match(b) {
			t.Errorf("%s does not document %q; add it with a comment saying what it does and its default", path, k)
		}
	}
}

func TestShippedAgentConfig(t *testing.T) {
	path := filepath.Join(shippedDir, "agent.toml")
	checkDocumented(t, path, tomlKeys(t, agent.Config{}))
	for _, p := range []string{path, uncommented(t, path)} {
		e := &env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
		cfg, _, err := loadAgentConfig(e, []string{"--config", p})
		if err != nil {
			t.Fatalf("the agent's loader refuses %s: %v", p, err)
		}
		// The node's own token, where the file tells the admin to install
		// it: no token every node shares.
		if cfg.TokenFile != "/etc/llmgw/node.token" {
			t.Errorf("%s: token_file = %q; want the node's own token, /etc/llmgw/node.token", p, cfg.TokenFile)
		}
	}
	// The documented defaults are the real ones.
	cfg, _, err := loadAgentConfig(&env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }},
		[]string{"--config", uncommented(t, path)})
	if err != nil {
		t.Fatal(err)
	}
	// Every key whose comment shows the default, not an example. The hooks'
	// settings (run_dir, fetch_deadline, gc_*) matter most: the snippet's
	// PrologEpilogTimeout is checked against fetch_deadline's default.
	def := agent.Config{}.WithDefaults()
	for name, got := range map[string][2]any{
		"fabric":             {cfg.Fabric, def.Fabric},
		"cache_dir":          {cfg.CacheDir, def.CacheDir},
		"state_dir":          {cfg.StateDir, def.StateDir},
		"run_dir":            {cfg.RunDir, def.RunDir},
		"socket":             {cfg.Socket, def.Socket},
		"scan_interval":      {cfg.ScanInterval, def.ScanInterval},
		"report_interval":    {cfg.ReportInterval, def.ReportInterval},
		"dir_timeout":        {cfg.DirTimeout, scan.DefaultDirTimeout},
		"connections":        {cfg.Connections, def.Connections},
		"gpu_memory":         {cfg.GPUMemory, def.GPUMemory},
		"nvidia_smi":         {cfg.NvidiaSMI, def.NvidiaSMI},
		"fetch_deadline":     {cfg.FetchDeadline, def.FetchDeadline},
		"gc_interval":        {cfg.GCInterval, def.GCInterval},
		"gc_timeout":         {cfg.GCTimeout, def.GCTimeout},
		"hf_token_file":      {cfg.HFTokenFile, def.HFTokenFile},
		"cache_reserve":      {cfg.CacheReserve, def.CacheReserve},
		"fetch_min_speed":    {cfg.FetchMinSpeed, def.FetchMinSpeed},
		"gc_max_share":       {cfg.GCMaxShare, def.GCMaxShare},
		"gc_part_max_age":    {cfg.GCPartMaxAge, def.GCPartMaxAge},
		"cache_high":         {cfg.CacheHigh, evict.DefaultHigh},
		"cache_low":          {cfg.CacheLow, evict.DefaultLow},
		"keep_last_copy_for": {cfg.KeepLastCopyFor, evict.DefaultKeepLastCopyFor},
		"hook_fs_timeout":    {cfg.HookFSTimeout, def.HookFSTimeout},
		"hf_endpoint":        {cfg.HFEndpoint, def.HFEndpoint},
		"hf_cache":           {cfg.HFCache, def.HFCache},
		"hf_hub_offline":     {cfg.HubOffline(), def.HubOffline()},
	} {
		if got[0] != got[1] {
			t.Errorf("agent.toml documents %s = %v, but the default is %v", name, got[0], got[1])
		}
	}
}

func TestShippedCoordinatorConfig(t *testing.T) {
	path := filepath.Join(shippedDir, "coordinator.toml")
	var keys []string
	for _, k := range tomlKeys(t, coordinator.Config{}) {
		// Kept in Config only to be refused by name (a shipped file
		// setting it would not start), or read and ignored with a warning.
		if k != "agent_token_file" && k != "feature_sets_max" {
			keys = append(keys, k)
		}
	}
	checkDocumented(t, path, keys)
	for _, p := range []string{path, uncommented(t, path)} {
		// --help goes through the whole loader (file, environment, flags)
		// and stops before anything is opened.
		code, out, stderr := llmgwRun(t, nil, "coordinator", "--config", p, "--help")
		if code != 0 {
			t.Fatalf("the coordinator's loader refuses %s: exit %d: %s", p, code, stderr)
		}
		// The unit hands the service a copy of the token postinstall
		// creates (LoadCredential), since it runs as SlurmUser.
		const creds = "/run/credentials/llmgw-coordinator.service/"
		if !strings.Contains(out, creds+"admin.token") || strings.Contains(out, "agent.token") {
			t.Errorf("%s: the token files the unit hands over are not the ones in force; --help shows:\n%s", p, out)
		}
	}
	unit, err := os.ReadFile("../../packaging/systemd/llmgw-coordinator.service")
	if err != nil {
		t.Fatal(err)
	}
	if line := "LoadCredential=admin.token:/etc/llmgw/admin.token"; !bytes.Contains(unit, []byte("\n"+line+"\n")) {
		t.Errorf("llmgw-coordinator.service lacks %s: the service could not read the token postinstall creates", line)
	}
	// A credential whose file is missing fails the unit, and postinstall
	// no longer makes agent.token.
	if bytes.Contains(unit, []byte("agent.token")) {
		t.Error("llmgw-coordinator.service still loads agent.token, which postinstall no longer creates: the unit would fail to start")
	}
	var cfg coordinator.Config
	if err := decodeTOML("coordinator", uncommented(t, path), true, &cfg); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][2]any{
		"listen":          {cfg.Listen, coordinator.DefaultListen},
		"db":              {cfg.DB, coordinator.DefaultDB},
		"report_interval": {cfg.ReportInterval, coordinator.DefaultReportInterval},
		"stall_after":     {cfg.StallAfter, coordinator.DefaultStallAfter},
		"max_batch":       {cfg.MaxBatch, coordinator.DefaultMaxBatch},
		"max_batch_wait":  {cfg.MaxBatchWait, coordinator.DefaultMaxBatchWait},
	} {
		if got[0] != got[1] {
			t.Errorf("coordinator.toml documents %s = %v, but the default is %v", name, got[0], got[1])
		}
	}
}

// TestShippedUnits checks that each unit starts its daemon on the file the
// package installs, and that the command line needs no shell: the
// integration test runs ExecStart split on spaces, as systemd does.
func TestShippedUnits(t *testing.T) {
	for unit, want := range map[string]string{
		"llmgw-agent.service":       "/usr/bin/llmgw agent --config " + agent.DefaultConfigFile,
		"llmgw-coordinator.service": "/usr/bin/llmgw coordinator --config " + defaultCoordinatorConfig,
	} {
		b, err := os.ReadFile(filepath.Join("../../packaging/systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindAllSubmatch(b, -1)
		if len(m) != 1 || string(m[0][1]) != want {
			t.Errorf("%s: ExecStart lines %q; want exactly one, %q", unit, m, want)
		}
		lines := []string{"Type=notify", "Restart=on-failure", "StateDirectory=llmgw"}
		if unit == "llmgw-agent.service" {
			// It leaves the hooks' resolved copy of agent.toml beside it.
			lines = append(lines, "ProtectSystem=full", "ReadWritePaths=-/etc/llmgw")
		}
		if unit == "llmgw-coordinator.service" {
			// Not root, and nothing writable but its state.
			lines = append(lines, "User=slurm", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "ReadWritePaths=/var/lib/llmgw")
		}
		for _, line := range lines {
			if !bytes.Contains(b, []byte("\n"+line+"\n")) {
				t.Errorf("%s lacks %s", unit, line)
			}
		}
	}
}

// TestSnippetPassesDoctor checks the slurm.conf lines the package documents
// with the doctor's own rules: the PrologEpilogTimeout there must stay above
// the fetch deadline. Its Prolog and Epilog are the site's directories,
// which hold llmgw's hooks only on a node set up as the snippet says.
func TestSnippetPassesDoctor(t *testing.T) {
	b, err := os.ReadFile("../../packaging/slurm.conf.snippet")
	if err != nil {
		t.Fatal(err)
	}
	conf, includes := slurm.ParseConf(b)
	if len(includes) != 0 {
		t.Errorf("the snippet includes %v", includes)
	}
	want := map[string]string{
		"prologflags":      "Alloc",
		"prolog":           "/etc/slurm/prolog.d/*",
		"epilog":           "/etc/slurm/epilog.d/*",
		"taskprolog":       doctor.DefaultHookDir + "/task-prolog",
		"plugstackconfig":  "/etc/slurm/plugstack.conf",
		"jobsubmitplugins": "lua",
	}
	for k, v := range want {
		if conf[k] != v {
			t.Errorf("snippet: %s=%q, want %q", k, conf[k], v)
		}
	}
	if len(conf) != len(want)+1 {
		t.Errorf("snippet sets %d settings, want exactly %d (those above and PrologEpilogTimeout): %v", len(conf), len(want)+1, conf)
	}
	fs := doctor.CheckSettings(conf, "/etc/slurm/slurm.conf", nil, doctor.Options{FetchDeadline: fetchDeadline(agent.Config{})})
	for _, f := range fs {
		switch f.Check {
		case "PrologFlags", "PrologEpilogTimeout", "job_submit":
			if f.Severity != doctor.OK {
				t.Errorf("the snippet fails the doctor's %s check: %s", f.Check, f.Message)
			}
		}
	}
}

// TestPackagedPaths: the paths the doctor, the wrappers and the plugstack
// line expect are the ones nfpm.yaml installs.
func TestPackagedPaths(t *testing.T) {
	nfpm, err := os.ReadFile("../../packaging/nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{
		doctor.DefaultHookDir + "/prolog", doctor.DefaultHookDir + "/epilog", doctor.DefaultHookDir + "/task-prolog",
		doctor.DefaultHookDir + "/llmgw-hook",
		agent.DefaultConfigFile, defaultCoordinatorConfig, "/usr/share/llmgw/job_submit.lua",
	} {
		if !bytes.Contains(nfpm, []byte("dst: "+dst+"\n")) {
			t.Errorf("nfpm.yaml installs nothing at %s", dst)
		}
	}
	// The plugin ships per Slurm release (packaging/spank): its package
	// installs it where the doctor looks, and its postinst and postrm write
	// and remove one optional plugstack line naming it in the file the
	// doctor's fix names.
	spank, err := os.ReadFile("../../packaging/spank/nfpm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(spank, []byte("dst: "+doctor.DefaultSpankPlugin+"\n")) {
		t.Errorf("packaging/spank/nfpm.yaml installs nothing at %s", doctor.DefaultSpankPlugin)
	}
	for _, script := range []string{"postinst.sh", "postrm.sh"} {
		b, err := os.ReadFile("../../packaging/spank/" + script)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("conf=/etc/slurm/plugstack.conf.d/llmgw.conf\n")) {
			t.Errorf("packaging/spank/%s does not edit /etc/slurm/plugstack.conf.d/llmgw.conf", script)
		}
		_, after, ok := bytes.Cut(b, []byte("line='"))
		line, _, ok2 := bytes.Cut(after, []byte("'"))
		if !ok || !ok2 {
			t.Fatalf("packaging/spank/%s has no line='...'", script)
		}
		ps, _, err := slurm.ParsePlugstack(append(line, '\n'))
		if err != nil || len(ps) != 1 || ps[0].Path != doctor.DefaultSpankPlugin || ps[0].Required {
			t.Errorf("packaging/spank/%s writes %q = %+v, %v; want one optional line for %s", script, line, ps, err, doctor.DefaultSpankPlugin)
		}
	}
	// The hooks write the resolved copy of agent.toml into /etc/llmgw at run
	// time; purge must remove it, or /etc/llmgw outlives the package.
	postrm, err := os.ReadFile("../../packaging/scripts/postremove.sh")
	if err != nil {
		t.Fatal(err)
	}
	if resolved := nodeconf.ResolvedPath(agent.DefaultConfigFile); !bytes.Contains(postrm, []byte("rm -f "+resolved+" ")) {
		t.Errorf("packaging/scripts/postremove.sh does not remove %s on purge", resolved)
	}
	for _, hook := range []string{"prolog", "epilog", "task-prolog"} {
		b, err := os.ReadFile("../../packaging/libexec/" + hook)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("hook="+doctor.DefaultHookDir+"/llmgw-hook\n")) {
			t.Errorf("packaging/libexec/%s does not run %s/llmgw-hook", hook, doctor.DefaultHookDir)
		}
	}
}

// TestPackagedWrappers runs the packaged Prolog, Epilog and TaskProlog
// scripts as slurmd does (no PATH, the job in the environment) on a copy
// whose hook= line names a stand-in for llmgw-hook, to check what the
// scripts themselves decide: the Prolog and Epilog exit 0 whatever the hook
// does (non-zero would drain the node), the TaskProlog passes the hook's
// stdout and status on (a non-zero TaskProlog is how a job learns its
// weights could not be had), a missing hook fails nothing, and the hook
// gets slurmd's environment as it was, with no PATH added.
// scripts/test-package runs them with the real llmgw-hook.
func TestPackagedWrappers(t *testing.T) {
	dir := t.TempDir()
	// The stand-in reports its arguments and whether PATH was in the
	// environment it was started with, then does what LLMGW_TEST_HOOK says.
	hook := filepath.Join(dir, "llmgw-hook")
	os.WriteFile(hook, []byte(`#!/bin/sh
if tr '\0' '\n' </proc/$$/environ | grep -q '^PATH='; then echo "export SAW_PATH=yes"; else echo "export SAW_PATH=no"; fi
echo "export HOOK_ARGS=$*"
echo "stand-in hook stderr" >&2
case $LLMGW_TEST_HOOK in
exit*) exit "${LLMGW_TEST_HOOK#exit}" ;;
kill) kill -9 $$ ;;
esac
`), 0o755)
	wrappers := map[string]string{}
	for _, name := range []string{"prolog", "epilog", "task-prolog"} {
		b, err := os.ReadFile(filepath.Join("../../packaging/libexec", name))
		if err != nil {
			t.Fatal(err)
		}
		line := "hook=" + doctor.DefaultHookDir + "/llmgw-hook\n"
		if !bytes.Contains(b, []byte(line)) {
			t.Fatalf("packaging/libexec/%s has no line %q", name, line)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, bytes.Replace(b, []byte(line), []byte("hook="+hook+"\n"), 1), 0o755)
		wrappers[name] = p
	}
	run := func(name, mode string) (code int, stdout, stderr string) {
		cmd := exec.Command(wrappers[name])
		cmd.Env = []string{"SLURM_JOB_ID=7", "SLURMD_NODENAME=n1", "LLMGW_TEST_HOOK=" + mode}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode() // -1 for a signal
		case err != nil:
			t.Fatalf("%s: %v", name, err)
		}
		return code, out.String(), errb.String()
	}
	for _, tc := range []struct {
		name, mode string
		want       int
	}{
		{"prolog", "exit0", 0}, {"prolog", "exit3", 0}, {"prolog", "kill", 0},
		{"epilog", "exit0", 0}, {"epilog", "exit3", 0}, {"epilog", "kill", 0},
		{"task-prolog", "exit0", 0}, {"task-prolog", "exit1", 1}, {"task-prolog", "exit3", 3}, {"task-prolog", "kill", -1},
	} {
		code, out, errs := run(tc.name, tc.mode)
		if code != tc.want {
			t.Errorf("%s with the hook's %s: exit %d, want %d; stderr %q", tc.name, tc.mode, code, tc.want, errs)
		}
		if !strings.Contains(out, "export SAW_PATH=no\n") || !strings.Contains(out, "export HOOK_ARGS="+tc.name+"\n") {
			t.Errorf("%s: the hook did not run as `llmgw-hook %s` with slurmd's environment (no PATH); stdout %q", tc.name, tc.name, out)
		}
		if tc.name != "task-prolog" && tc.mode != "exit0" && !strings.Contains(errs, "not failing the") {
			t.Errorf("%s with the hook's %s: stderr does not say the failure was absorbed: %q", tc.name, tc.mode, errs)
		}
	}
	// A hook missing (an upgrade half done) fails nothing, and says so.
	os.Remove(hook)
	for _, name := range []string{"prolog", "epilog", "task-prolog"} {
		if code, out, errs := run(name, "exit0"); code != 0 || out != "" || !strings.Contains(errs, "is missing") {
			t.Errorf("%s without its hook: exit %d, stdout %q, stderr %q; want 0, nothing, and why", name, code, out, errs)
		}
	}
}
