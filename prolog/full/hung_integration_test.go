//go:build integration

package full

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/fusetest"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestPrologHungMount: llmgw prolog (the full path), for weights on a FUSE
// mount whose daemon is stopped, records the hung mount for the TaskProlog
// within dir_timeout and returns, for a path source and for a cache
// directory on the stuck mount alike.
//
// Needs root and bindfs: sudo go test -tags integration -run Hung ./prolog/full/
func TestPrologHungMount(t *testing.T) {
	fusetest.Need(t)
	src, mnt := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(src, "llama"), 0o755)
	os.WriteFile(filepath.Join(src, "llama", "model.safetensors"), []byte("weights"), 0o644)
	os.MkdirAll(filepath.Join(src, "cache"), 0o755)
	daemon := fusetest.Mount(t, src, mnt)
	path := catalog.Model{Name: "llama", Source: filepath.Join(mnt, "llama")}
	remote := catalog.Model{Name: "qwen", Source: "http://127.0.0.1:1/qwen.gguf"}
	p, _, _ := newProlog(t, path, remote)
	p.Config.HookFSTimeout = time.Second
	p.Config.FetchDeadline = time.Minute
	fusetest.Stop(t, daemon)

	for _, tc := range []struct {
		m       catalog.Model
		cache   string
		weights string
	}{
		{path, p.Config.CacheDir, path.Source},
		{remote, filepath.Join(mnt, "cache"), catalog.CachePathFor(filepath.Join(mnt, "cache"), remote.Source)},
	} {
		p.Config.CacheDir = tc.cache
		p.Fetcher.CacheDir = tc.cache
		done := make(chan struct{})
		go func() {
			p.Run(context.Background(), prolog.Job{ID: "7", Node: "n1", Model: tc.m.Name}, nil)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: llmgw prolog still running after 30 s on a hung mount: slurmd would kill it and drain the node", tc.m.Name)
		}
		rec, err := catalog.ReadJobRecord(p.Config.RunDir, "7")
		want := "no answer to a stat of " + tc.weights + " within hook_fs_timeout (1 s; 0 earlier operations answered): the filesystem is not answering (a hung mount?)"
		if err != nil || !strings.Contains(rec.Error, want) {
			t.Errorf("%s: record %+v, %v; want the error %q", tc.m.Name, rec, err, want)
		}
	}
}
