package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/weights/catalog"
)

// containerReader is the task in the container: it reads the file
// LLMGW_MODEL_PATH names and says its digest, then whether it could open it
// for writing. Built static (no cgo), since the container's root holds
// nothing but it and the mounts.
const containerReader = `package main

import (
	"crypto/sha256"
	"fmt"
	"os"
)

func main() {
	p := os.Getenv("LLMGW_MODEL_PATH")
	b, err := os.ReadFile(p)
	if err != nil {
		fmt.Printf("unreadable %s: %v\n", p, err)
		os.Exit(3)
	}
	fmt.Printf("sha256 %x\n", sha256.Sum256(b))
	if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
		f.Close()
		fmt.Println("writable")
	} else {
		fmt.Println("not writable:", err)
	}
}
`

// TestContainerSeesModelPath is docs/containers.md's --container-mounts
// tried for real: a task whose root is an empty tmpfs holding only the
// documented bind mounts (as pyxis makes a container's root from the image
// and --container-mounts) finds the weight file at the LLMGW_MODEL_PATH
// llmgw's TaskProlog exported, for a model in the cache and one in a
// weights dir on a filer, and cannot write it; with the entry for that
// file's directory left out of the mounts, the path is not there.
//
// The node's side is a tree of real files laid out at the packaged paths
// (/var/cache/llmgw, /run/llmgw) and the page's filer (/lustre/models)
// under a temp dir, so the host's own directories are not touched; the
// mounts are made in a mount namespace of their own (unshare --mount,
// private), which ends with the process and leaves nothing behind.
func TestContainerSeesModelPath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test bind-mounts into a mount namespace of its own (unshare --mount) and chroots into it")
	}
	for _, tool := range []string{"unshare", "mount", "chroot", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not in PATH: %v", tool, err)
		}
	}
	// unshare --propagation private remounts / as private, which the
	// kernel refuses (EINVAL) where / is not a mount point: inside the
	// release roots scripts/test-integration chroots into. Nothing here
	// depends on the Slurm release, and the host runs it.
	if !rootIsMountPoint(t) {
		t.Skip("/ is not a mount point here (a chroot): unshare cannot make the namespace's mounts private; the test runs on the host")
	}
	b, err := os.ReadFile("../../docs/containers.md")
	if err != nil {
		t.Fatal(err)
	}
	opt := regexp.MustCompile(`--container-mounts=(\S+)`).FindStringSubmatch(string(b))
	if opt == nil {
		t.Fatal("docs/containers.md shows no --container-mounts")
	}
	type bind struct {
		src, dst string
		ro       bool
	}
	var mounts []bind
	for _, e := range strings.Split(opt[1], ",") {
		parts := strings.SplitN(e, ":", 3)
		if len(parts) < 2 {
			t.Fatalf("--container-mounts entry %q is not SRC:DST[:FLAGS]", e)
		}
		m := bind{src: parts[0], dst: parts[1]}
		if len(parts) == 3 {
			for _, f := range strings.Split(parts[2], "+") {
				m.ro = m.ro || f == "ro"
			}
		}
		mounts = append(mounts, m)
	}

	base := t.TempDir()
	node := filepath.Join(base, "node") // the node's /, as the task's paths see it
	reader := filepath.Join(base, "reader")
	src := filepath.Join(base, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module reader\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.go"), []byte(containerReader), 0o644)
	build := exec.Command("go", "build", "-o", reader, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the container's reader: %v: %s", err, out)
	}

	// What the Prolog left on the node: a model fetched into the cache and
	// one found in a weights dir on the filer, with the job records the
	// TaskProlog reads.
	origin := "https://example.org/m1.gguf"
	models := []struct{ job, model, path string }{
		{"41", "m1", catalog.CachePathFor(nodeconf.DefaultCacheDir, origin)},
		{"42", "m2", "/lustre/models/m2.gguf"},
	}
	runDir := filepath.Join(node, catalog.DefaultRunDir)
	conf := filepath.Join(base, "agent.toml")
	os.WriteFile(conf, []byte(fmt.Sprintf("run_dir = %q\nstate_dir = %q\ncache_dir = %q\nsocket = %q\n",
		runDir, filepath.Join(base, "state"), filepath.Join(node, nodeconf.DefaultCacheDir), filepath.Join(runDir, "agent.sock"))), 0o644)
	sums := map[string][32]byte{}
	for _, m := range models {
		data := append([]byte("GGUF"), bytes.Repeat([]byte(m.model), 4096)...)
		sums[m.model] = sha256.Sum256(data)
		p := filepath.Join(node, m.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := catalog.WriteJobRecord(runDir, catalog.JobRecord{Job: m.job, Model: m.model, Path: m.path}); err != nil {
			t.Fatal(err)
		}
	}

	// inContainer runs the reader as the task, with the TaskProlog's
	// exports, in a root that holds the given mounts only.
	inContainer := func(t *testing.T, env []string, binds []bind) (string, error) {
		t.Helper()
		root := filepath.Join(t.TempDir(), "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		var sh strings.Builder
		sh.WriteString("set -e\n")
		fmt.Fprintf(&sh, "mount -t tmpfs -o mode=0755 llmgw-ctr %q\n", root)
		fmt.Fprintf(&sh, "mkdir -p %q\ncp %q %q\n", root+"/bin", reader, root+"/bin/task")
		for _, m := range binds {
			fmt.Fprintf(&sh, "mkdir -p %q\nmount --bind %q %q\n", root+m.dst, filepath.Join(node, m.src), root+m.dst)
			if m.ro {
				fmt.Fprintf(&sh, "mount -o remount,bind,ro %q\n", root+m.dst)
			}
		}
		fmt.Fprintf(&sh, "exec chroot %q /bin/task\n", root)
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", sh.String())
		cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	for _, m := range models {
		t.Run(m.model, func(t *testing.T) {
			code, out, stderr := llmgwRun(t, map[string]string{"SLURM_JOB_ID": m.job, "SLURMD_NODENAME": "n1"}, "task-prolog", "--config", conf)
			if code != 0 {
				t.Fatalf("task-prolog: exit %d: %s %s", code, out, stderr)
			}
			var env []string
			path := ""
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				kv, ok := strings.CutPrefix(line, "export ")
				if !ok {
					t.Fatalf("task-prolog said %q; want export lines", line)
				}
				env = append(env, kv)
				if v, ok := strings.CutPrefix(kv, "LLMGW_MODEL_PATH="); ok {
					path = v
				}
			}
			if path != m.path {
				t.Fatalf("task-prolog exported LLMGW_MODEL_PATH=%q; want %q", path, m.path)
			}

			got, err := inContainer(t, env, mounts)
			if err != nil {
				if strings.Contains(got, "ermission denied") || strings.Contains(got, "Operation not permitted") {
					t.Skipf("no mount namespace here: %s", got)
				}
				t.Fatalf("with the documented mounts %s, the task could not read %s: %v\n%s", opt[1], path, err, got)
			}
			if want := fmt.Sprintf("sha256 %x\n", sums[m.model]); !strings.HasPrefix(got, want) {
				t.Errorf("in the container %s reads as %q; want the node's file, %q", path, got, want)
			}
			if !strings.Contains(got, "not writable") {
				t.Errorf("the task could open %s for writing (%q): the documented mounts are read-only", path, got)
			}

			// The same container without the mount that covers the path.
			var rest []bind
			dropped := ""
			for _, b := range mounts {
				if path == b.dst || strings.HasPrefix(path, b.dst+"/") {
					dropped = b.src + ":" + b.dst
					continue
				}
				rest = append(rest, b)
			}
			if dropped == "" {
				t.Fatalf("no documented mount covers %s", path)
			}
			got, err = inContainer(t, env, rest)
			if err == nil || !strings.Contains(got, "unreadable") {
				t.Errorf("without %s the task still read %s (%v): %q", dropped, path, err, got)
			}
		})
	}
}

// rootIsMountPoint: /proc/self/mountinfo lists a mount at /. In a chroot
// whose directory is not itself a mount, the mounts it lives in are
// outside the process's root and are not listed.
func rootIsMountPoint(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("cannot read /proc/self/mountinfo: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT ...
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/" {
			return true
		}
	}
	return false
}
