package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// nhcCheck is the NHC check the package installs (packaging/nhc).
const nhcCheck = "../../packaging/nhc/llmgw.nhc"

// runNHC runs check_llmgw_cache with args as NHC would: sourced into bash,
// with NHC's die (here: print the reason). It returns what die said ("" when
// the check passed) and the check's status.
func runNHC(t *testing.T, args ...string) (string, string) {
	t.Helper()
	script := `die() { echo "DIE $1 $2"; }
source "$0"
check_llmgw_cache "$@"
echo "rc=$?"`
	out, err := exec.Command("bash", append([]string{"-c", script, nhcCheck}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	text := strings.TrimSpace(string(out))
	died := ""
	for _, line := range strings.Split(text, "\n") {
		if s, ok := strings.CutPrefix(line, "DIE 1 "); ok {
			died = s
		}
	}
	return died, text[strings.LastIndex(text, "rc="):]
}

// tmpfs mounts a tmpfs of size under a new directory, for a cache
// filesystem that can be filled or made read-only for real.
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "llmgw-nhc-test", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// TestNHCCheckPassesAHealthyCache: a usable cache passes, and the probe
// file is gone afterwards.
func TestNHCCheckPassesAHealthyCache(t *testing.T) {
	dir := tmpfs(t, "8m")
	if died, rc := runNHC(t, "-d", dir, "-f", "1%"); died != "" || rc != "rc=0" {
		t.Fatalf("a healthy cache failed: %q %s", died, rc)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the check left %v in the cache", ents)
	}
	// The directory from the agent's configuration, as the agent reads it.
	conf := filepath.Join(t.TempDir(), "agent.toml")
	os.WriteFile(conf, []byte("# cache_dir = \"/nowhere\"\ncache_dir = \""+dir+"\"\n"), 0o644)
	if died, rc := runNHC(t, "-c", conf); died != "" || rc != "rc=0" {
		t.Errorf("cache_dir from %s: %q %s", conf, died, rc)
	}
}

// TestNHCCheckFailsABrokenCache: each way a cache cannot be used fails the
// node, with a reason that names the directory and what is wrong.
func TestNHCCheckFailsABrokenCache(t *testing.T) {
	full := tmpfs(t, "4m")
	// Fill it to the last block: dd stops at ENOSPC.
	exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(full, "fill"), "bs=64k").Run()
	// 3 MiB free on a 4 MiB filesystem, and the least wanted above it.
	roomy := tmpfs(t, "4m")
	exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(roomy, "fill"), "bs=1M", "count=1").Run()
	ro := tmpfs(t, "4m")
	if out, err := exec.Command("mount", "-o", "remount,ro", ro).CombinedOutput(); err != nil {
		t.Fatalf("remount ro: %v %s", err, out)
	}
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o644)
	conf := filepath.Join(t.TempDir(), "agent.toml")
	os.WriteFile(conf, []byte("cache_dir = \"/nonexistent/llmgw-cache\"\n"), 0o644)

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing", []string{"-d", "/nonexistent/llmgw-cache"}, "llmgw cache /nonexistent/llmgw-cache is missing or not a directory"},
		{"missing, from the agent's configuration", []string{"-c", conf}, "/nonexistent/llmgw-cache is missing"},
		{"not a directory", []string{"-d", notDir}, "is missing or not a directory"},
		{"read-only", []string{"-d", ro}, "cannot be written: Read-only file system"},
		{"full", []string{"-d", full}, "llmgw cache " + full},
		{"under the least free space", []string{"-d", roomy, "-f", "3500K"}, "MiB free, under the 3500K"},
		{"under the least free share", []string{"-d", roomy, "-f", "90%"}, "under the 90%"},
		{"a bad -f", []string{"-d", roomy, "-f", "lots"}, "-f lots is not a percentage"},
	} {
		died, rc := runNHC(t, c.args...)
		if !strings.Contains(died, c.want) || rc != "rc=1" {
			t.Errorf("%s: die %q, %s; want it to die with %q", c.name, died, rc, c.want)
		}
	}
	// The same roomy cache passes a bound it meets: the failures above are
	// the bounds', not the filesystem's.
	if died, rc := runNHC(t, "-d", roomy, "-f", "1M"); died != "" || rc != "rc=0" {
		t.Errorf("roomy cache with -f 1M: %q %s", died, rc)
	}
}
