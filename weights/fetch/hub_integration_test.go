//go:build integration

package fetch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/fusetest"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestHubModelReadOnlyCache: a Hugging Face cache mounted read-only (a
// site's shared cache on the nodes) is used as it is, never written: a
// model whose snapshot and refs are there is had without a byte; one whose
// snapshot is there but whose refs/main names another commit fails saying
// which, and what its admin can do (an engine given the id would load the
// other commit); one not there fails saying the cache is read-only.
// Needs root and bindfs:
//
//	sudo GOTOOLCHAIN=go1.27.3 go test -tags integration -run ReadOnlyCache ./weights/fetch/
func TestHubModelReadOnlyCache(t *testing.T) {
	fusetest.Need(t)
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	x.ensure(t, hb) // a writable cache, filled
	src := x.cache
	ro := filepath.Join(t.TempDir(), "ro")
	os.MkdirAll(ro, 0o755)
	fusetest.Mount(t, src, ro, "ro")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	served := x.h.Served()
	if snap, err := x.f.EnsureHub(ctx, ro, hb); err != nil || snap != catalog.HubSnapshotDir(ro, hb.Repo, hb.Commit) {
		t.Errorf("a read-only cache holding the model: %q, %v", snap, err)
	}
	if x.h.Served() != served {
		t.Error("bytes were fetched for a model the read-only cache holds")
	}

	other := strings.Repeat("d", 40)
	os.WriteFile(filepath.Join(src, "models--org--tiny", "refs", "main"), []byte(other), 0o644)
	_, err := x.f.EnsureHub(ctx, ro, hb)
	for _, want := range []string{"refs/main", other, hb.Commit, "read-only", "an engine given org/tiny"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refs/main naming another commit in a read-only cache: %v; want it to say %q", err, want)
		}
	}

	os.RemoveAll(filepath.Join(src, "models--org--tiny"))
	_, err = x.f.EnsureHub(ctx, ro, hb)
	if err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("a model not in a read-only cache: %v; want it to say the cache is read-only", err)
	}
}
