package fetch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/weights/catalog"
)

// TestHelperFetchProcess is not a test: TestEnsureOneFetchPerNode runs the
// test binary again with LLMGW_TEST_FETCH_CHILD set, and this is what each of
// those processes does — one Ensure, printing the path.
func TestHelperFetchProcess(t *testing.T) {
	if os.Getenv("LLMGW_TEST_FETCH_CHILD") != "1" {
		t.Skip("helper process for TestEnsureOneFetchPerNode")
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	f := &Fetcher{
		CacheDir:    os.Getenv("LLMGW_TEST_CACHE"),
		LockDir:     os.Getenv("LLMGW_TEST_LOCKS"),
		IdleTimeout: 5 * time.Second,
		Log:         log,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := f.Ensure(ctx, os.Getenv("LLMGW_TEST_SOURCE"), Want{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Println("PATH=" + p)
}

// TestEnsureOneFetchPerNode runs two processes fetching the same source into
// the same cache, as two Slurm prologs on one node do: the origin must see
// one download, and both must get the file.
func TestEnsureOneFetchPerNode(t *testing.T) {
	o := newFakeOrigin(t, 1<<20)
	o.set(func(o *fakeOrigin) { o.writeDelay = 30 * time.Millisecond }) // ~1 s, so the two overlap
	dir := t.TempDir()
	env := append(os.Environ(),
		"LLMGW_TEST_FETCH_CHILD=1",
		"LLMGW_TEST_CACHE="+filepath.Join(dir, "cache"),
		"LLMGW_TEST_LOCKS="+filepath.Join(dir, "locks"),
		"LLMGW_TEST_SOURCE="+o.url(),
	)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFetchProcess$", "-test.count=1")
		cmd.Env = env
		out := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	want := "PATH=" + catalog.CachePathFor(filepath.Join(dir, "cache"), o.url())
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, outs[i])
		}
		if !strings.Contains(outs[i].String(), want) {
			t.Errorf("process %d printed %q, want %q", i, outs[i], want)
		}
	}
	if n := len(o.requests()); n != 1 {
		t.Errorf("two processes made %d requests; the second must wait and find the file", n)
	}
	if !strings.Contains(outs[0].String()+outs[1].String(), "another process on this node is fetching") {
		t.Errorf("neither process waited on the lock; the test did not overlap them:\n%s\n%s", outs[0], outs[1])
	}
	assertFile(t, strings.TrimPrefix(want, "PATH="), o.data)
}

// TestLockWaitsAndHonoursContext: a process waiting on another's lock gives
// up when its context does.
func TestLockWaitsAndHonoursContext(t *testing.T) {
	f := &Fetcher{LockDir: t.TempDir()}
	target := filepath.Join(t.TempDir(), "x.gguf")
	unlock, err := f.lock(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file description, so a second open in
	// this process contends like another process would.
	g := &Fetcher{LockDir: f.LockDir}
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	if _, err := g.lock(ctx, target); err == nil {
		t.Fatal("second lock succeeded while the first was held")
	}
	unlock()
	unlock2, err := g.lock(context.Background(), target)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}

func TestPickLockDir(t *testing.T) {
	tmp := t.TempDir()
	t.Run("preferred when writable", func(t *testing.T) {
		want := filepath.Join(tmp, "run", "llmgw", "locks")
		if got, err := pickLockDir(want, tmp); err != nil || got != want {
			t.Errorf("pickLockDir = %q, %v; want %q", got, err, want)
		}
	})
	blocker := filepath.Join(tmp, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fallback := filepath.Join(tmp, fmt.Sprintf("llmgw-locks-%d", os.Getuid()))
	t.Run("fallback per uid", func(t *testing.T) {
		got, err := pickLockDir(filepath.Join(blocker, "locks"), tmp)
		if err != nil || got != fallback {
			t.Fatalf("pickLockDir = %q, %v; want %q", got, err, fallback)
		}
		if st, err := os.Stat(got); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("fallback dir %v %v; want mode 0700", st, err)
		}
	})
	t.Run("planted symlink refused", func(t *testing.T) {
		tmp2 := t.TempDir()
		planted := filepath.Join(tmp2, fmt.Sprintf("llmgw-locks-%d", os.Getuid()))
		if err := os.Symlink(t.TempDir(), planted); err != nil {
			t.Fatal(err)
		}
		if got, err := pickLockDir(filepath.Join(blocker, "locks"), tmp2); err == nil {
			t.Errorf("pickLockDir followed a planted symlink to %q", got)
		}
	})
}
