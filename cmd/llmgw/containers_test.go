package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/cmd/llmgw/doctor"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestContainerMountsCoverTaskProlog keeps docs/containers.md true to the
// code: pyxis runs the TaskProlog inside the container's filesystem (the
// page says where that was read), so the enroot mount file it documents
// must bring in, read-only and at the same path, everything llmgw's
// TaskProlog reads with the packaged defaults: the wrapper and the hook it
// runs, agent.toml's resolved copy, the run dir with the job's record, and
// the cache dir its exported path may point into. The srun example's
// --container-mounts, in pyxis's SRC:DST[:FLAGS] syntax, must mount the
// cache dir read-only where the TaskProlog says it is.
func TestContainerMountsCoverTaskProlog(t *testing.T) {
	b, err := os.ReadFile("../../docs/containers.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	wrapper, err := os.ReadFile("../../packaging/libexec/task-prolog")
	if err != nil {
		t.Fatal(err)
	}
	hookPath := regexp.MustCompile(`(?m)^hook=(\S+)$`).FindStringSubmatch(string(wrapper))
	if hookPath == nil {
		t.Fatal("packaging/libexec/task-prolog names no hook= binary")
	}
	need := []string{
		filepath.Join(doctor.DefaultHookDir, "task-prolog"),
		hookPath[1],
		nodeconf.ResolvedPath(nodeconf.DefaultFile),
		filepath.Join(catalog.DefaultRunDir, "some-job-record"),
		catalog.CachePathFor(nodeconf.DefaultCacheDir, "https://example.org/m.gguf"),
	}

	var mounts [][]string // source, target, type, options
	in := false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "# /etc/enroot/mounts.d/"):
			in = true
		case in && strings.HasPrefix(line, "```"):
			in = false
		case in:
			f := strings.Fields(line)
			if len(f) != 4 {
				t.Fatalf("docs/containers.md: %q is not an enroot fstab line (source target type options)", line)
			}
			mounts = append(mounts, f)
		}
	}
	if len(mounts) == 0 {
		t.Fatal("docs/containers.md has no /etc/enroot/mounts.d block")
	}
	for _, m := range mounts {
		opts := strings.Split(m[3], ",")
		if m[0] != m[1] || !slices.Contains(opts, "bind") || !slices.Contains(opts, "ro") {
			t.Errorf("mount %q: want a read-only bind at the same path", m)
		}
		if m[0] == filepath.Dir(nodeconf.DefaultFile) {
			t.Errorf("mount %q brings the whole of %s, with the agent's token, into every container", m, m[0])
		}
	}
	covered := func(p string, targets []string) bool {
		return slices.ContainsFunc(targets, func(dst string) bool { return p == dst || strings.HasPrefix(p, dst+"/") })
	}
	var targets []string
	for _, m := range mounts {
		targets = append(targets, m[1])
	}
	for _, p := range need {
		if !covered(p, targets) {
			t.Errorf("the TaskProlog reads %s, which no mount in docs/containers.md brings into the container", p)
		}
	}

	opt := regexp.MustCompile(`--container-mounts=(\S+)`).FindStringSubmatch(doc)
	if opt == nil {
		t.Fatal("docs/containers.md shows no --container-mounts")
	}
	var jobTargets []string
	for _, e := range strings.Split(opt[1], ",") {
		parts := strings.SplitN(e, ":", 3)
		if len(parts) != 3 || parts[0] != parts[1] || !slices.Contains(strings.Split(parts[2], "+"), "ro") {
			t.Errorf("--container-mounts entry %q: want SRC:SRC:ro (pyxis separates flags with +)", e)
			continue
		}
		jobTargets = append(jobTargets, parts[1])
	}
	if p := need[len(need)-1]; !covered(p, jobTargets) {
		t.Errorf("--container-mounts=%s does not bring the cache path %s into the container", opt[1], p)
	}
}
