package fetch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/internal/loopfs"
	"github.com/llmgw/llmgw/weights/catalog"
)

// bigHubOnDisk is org/big, 24 MB in two shards, to be fetched into the
// Hugging Face cache inside a llmgw cache on a real ext4 filesystem of
// 60 MB, with free bytes left free beside a ballast file.
func bigHubOnDisk(t *testing.T, free int64) (x *hubFixture, hb catalog.Hub, ballast string) {
	t.Helper()
	mnt := loopfs.Mount(t, 60)
	x = newHubFixture(t)
	x.f.CacheDir = filepath.Join(mnt, "cache")
	x.cache = filepath.Join(x.f.CacheDir, catalog.DefaultHFDir)
	os.MkdirAll(x.f.CacheDir, 0o755)
	x.h.Commit("org/big", "main", map[string][]byte{
		"config.json":                      []byte(`{"model_type":"llama"}`),
		"model-00001-of-00002.safetensors": bytes.Repeat([]byte("1"), 12_000_000),
		"model-00002-of-00002.safetensors": bytes.Repeat([]byte("2"), 12_000_000),
		"model.safetensors.index.json":     []byte(`{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`),
	})
	hb = x.model(t, "org/big")
	now, _, err := statfsFree(x.f.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	ballast = filepath.Join(mnt, "ballast")
	bf, _ := os.Create(ballast)
	if err := preallocate(bf, now-free); err != nil {
		t.Fatal(err)
	}
	bf.Close()
	return x, hb, ballast
}

// A Hub model's room is claimed whole in the node's record of space, the
// one sets and files claim in, so a Hub fetch that does not fit asks
// MakeRoom (the agent's eviction) for the shortfall first, as every other
// fetch does; it fails only when eviction cannot free enough, saying what
// held the room, and fetches nothing then. Before, the Hub fetch checked
// the free space alone: on a disk an old revision or an unwanted file
// filled, it was refused though eviction could have made room, and its
// claim was invisible to the fetches beside it. On a real ext4
// filesystem: 24 MB of shards with 16 MB free.
func TestHubClaimEvicts(t *testing.T) {
	x, hb, ballast := bigHubOnDisk(t, 16_000_000)
	blobs := filepath.Join(catalog.HubRepoDir(x.cache, "org/big"), "blobs")

	// Eviction that cannot free anything: refused before the first byte,
	// saying what eviction said.
	var asked []string
	var askedNeed int64
	x.f.MakeRoom = func(ctx context.Context, dir string, need int64) (int64, string) {
		asked, askedNeed = append(asked, dir), need
		return 0, "eviction could not free it: snapshot X is in use by job 7"
	}
	_, err := x.f.EnsureHub(context.Background(), x.cache, hb)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "claimed whole before its first byte") || !strings.Contains(err.Error(), "in use by job 7") {
		t.Fatalf("EnsureHub with eviction unable to help: %v; want ErrNoSpace naming the whole claim and what eviction said", err)
	}
	if len(asked) != 1 || asked[0] != blobs || askedNeed < 8_000_000 || askedNeed > 9_000_000 {
		t.Errorf("MakeRoom asked %v for %d bytes; want once, for the blobs directory %s and the shortfall (about 8 MB)", asked, askedNeed, blobs)
	}
	if n := x.h.Served(); n != 0 {
		t.Errorf("%d bytes fetched for a model that did not fit", n)
	}

	// Eviction that frees the room: the model fetches whole.
	asked = nil
	x.f.MakeRoom = func(ctx context.Context, dir string, need int64) (int64, string) {
		asked = append(asked, dir)
		os.Remove(ballast)
		return need, ""
	}
	if _, err := x.f.EnsureHub(context.Background(), x.cache, hb); err != nil {
		t.Fatalf("EnsureHub once eviction makes room: %v", err)
	}
	if len(asked) != 1 {
		t.Errorf("MakeRoom asked %d times; want once, before the first byte", len(asked))
	}
	// Done: the model's claim holds nothing any more.
	if c, err := x.f.Claimed(context.Background(), blobs); err != nil || c != 0 {
		t.Errorf("claims after the model is complete: %d, %v; want 0", c, err)
	}
}

// While a Hub model is fetched, its claim is in the record: another
// fetch on the filesystem sees the room it will still take.
func TestHubClaimSeenByOthers(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	var during int64
	x.f.OnProgress = func(p Progress) {
		if p.Done > 0 && during == 0 {
			during, _ = x.f.Claimed(context.Background(), x.f.CacheDir)
		}
	}
	x.ensure(t, hb)
	if during <= 0 {
		t.Errorf("claims seen while the Hub model was fetched: %d; want its remaining bytes", during)
	}
	if c, _ := x.f.Claimed(context.Background(), x.f.CacheDir); c != 0 {
		t.Errorf("claims after: %d; want 0", c)
	}
}

// A Hub model's blobs are fetched into the llmgw cache's staging
// directory first, and on one filesystem the model's claim covers them
// there: a model that fits whole fetches without asking eviction for
// anything, and what is claimed during the fetch is never more than what
// the model still misses. After the merge of the hardened writer
// (staging) and the whole-model claim, each staged file also claimed its
// own room beside the model's claim, which did not shrink until the file
// moved into blobs/: every file counted twice while it downloaded, and a
// model that fitted was refused (TestEvictHubSnapshots, which then
// evicted to no avail). On a real ext4 filesystem: 24 MB of shards with
// 30 MB free.
func TestHubClaimCoversStaging(t *testing.T) {
	x, hb, _ := bigHubOnDisk(t, 30_000_000)
	var asked []int64
	x.f.MakeRoom = func(ctx context.Context, dir string, need int64) (int64, string) {
		asked = append(asked, need)
		return 0, "nothing to evict here"
	}
	var most int64
	x.f.OnProgress = func(p Progress) {
		if c, err := x.f.Claimed(context.Background(), x.f.CacheDir); err == nil {
			most = max(most, c)
		}
	}
	if _, err := x.f.EnsureHub(context.Background(), x.cache, hb); err != nil {
		t.Fatalf("EnsureHub of a model that fits: %v", err)
	}
	if len(asked) != 0 {
		t.Errorf("MakeRoom asked for %v bytes for a model that fits whole", asked)
	}
	if total := catalog.HubSize(hb); most > total {
		t.Errorf("claimed %d bytes at most during the fetch, more than the model's %d: a staged file counted twice", most, total)
	}
	blobs := filepath.Join(catalog.HubRepoDir(x.cache, "org/big"), "blobs")
	if c, err := x.f.Claimed(context.Background(), blobs); err != nil || c != 0 {
		t.Errorf("claims after the model is complete: %d, %v; want 0", c, err)
	}
}
