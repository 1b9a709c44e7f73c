package fetch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
)

// A fetch ahead of any job (Ahead) never has MakeRoom evict for it, and
// claims only what PrefetchRoom (the agent's budget at prefetch priority)
// gives; a job's fetch is not held to PrefetchRoom. A Hub model on a real
// ext4 filesystem: 24 MB of shards with 16 MB free, then with the room.
func TestAheadNeverEvictsAndKeepsToItsBudget(t *testing.T) {
	x, hb, ballast := bigHubOnDisk(t, 16_000_000)
	var evicted int
	x.f.MakeRoom = func(ctx context.Context, dir string, need int64) (int64, string) {
		evicted++
		os.Remove(ballast)
		return need, ""
	}
	ahead := Ahead(context.Background())

	// Short of free space: refused before its first byte, with no
	// eviction asked for, though eviction would have made the room.
	_, err := x.f.EnsureHub(ahead, x.cache, hb)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "a prefetch evicts nothing") {
		t.Fatalf("a prefetch short of room: %v; want ErrNoSpace saying a prefetch evicts nothing", err)
	}
	if evicted != 0 || x.h.Served() != 0 {
		t.Fatalf("a prefetch short of room had MakeRoom asked %d times and %d bytes fetched; want neither", evicted, x.h.Served())
	}

	// Room on the disk, none in the budget: refused with the budget's why.
	os.Remove(ballast)
	var asked []int64
	budget := "a prefetch takes only room below the low watermark"
	x.f.PrefetchRoom = func(ctx context.Context, dir string, need int64) (bool, string) {
		asked = append(asked, need)
		return false, budget
	}
	_, err = x.f.EnsureHub(ahead, x.cache, hb)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), budget) {
		t.Fatalf("a prefetch the budget has no room for: %v; want ErrNoSpace with the budget's why", err)
	}
	if total := catalog.HubSize(hb); len(asked) != 1 || asked[0] != total {
		t.Errorf("PrefetchRoom asked for %v; want once, for the model's %d bytes", asked, total)
	}
	if x.h.Served() != 0 || evicted != 0 {
		t.Errorf("%d bytes fetched, %d evictions for a prefetch the budget refused", x.h.Served(), evicted)
	}

	// A job's fetch is not the budget's to hold.
	x2, hb2, _ := bigHubOnDisk(t, 30_000_000)
	x2.f.PrefetchRoom = x.f.PrefetchRoom
	asked = nil
	if _, err := x2.f.EnsureHub(context.Background(), x2.cache, hb2); err != nil || len(asked) != 0 {
		t.Errorf("a job's fetch: %v, PrefetchRoom asked %v; want it fetched without asking", err, asked)
	}

	// The budget gives the room: fetched without eviction, the budget
	// asked for the model's bytes, and not again at each file's renewal
	// of the claim (only when the claim ran out before the last small
	// file, its blocks rounded up: for that file's bytes).
	asked = nil
	x.f.PrefetchRoom = func(ctx context.Context, dir string, need int64) (bool, string) {
		asked = append(asked, need)
		return true, ""
	}
	if _, err := x.f.EnsureHub(ahead, x.cache, hb); err != nil {
		t.Fatalf("a prefetch the budget has room for: %v", err)
	}
	var later int64
	for _, n := range asked[min(1, len(asked)):] {
		later += n
	}
	if len(asked) == 0 || asked[0] != catalog.HubSize(hb) || later > 64<<10 || evicted != 0 {
		t.Errorf("PrefetchRoom asked %v, MakeRoom %d times; want the model's bytes first, little after, and no eviction", asked, evicted)
	}
}

// A single file's prefetch claims through ClaimSpace, held to the budget
// like a model's: refused when PrefetchRoom says no, the file not made.
func TestAheadFileHeldToItsBudget(t *testing.T) {
	o := newFakeOrigin(t, 1<<20)
	f := testFetcher(t)
	var asked []int64
	f.PrefetchRoom = func(ctx context.Context, dir string, need int64) (bool, string) {
		asked = append(asked, need)
		return false, "no room below cache_low"
	}
	f.MakeRoom = func(ctx context.Context, dir string, need int64) (int64, string) {
		t.Errorf("MakeRoom asked for %d bytes for a prefetch", need)
		return 0, ""
	}
	_, err := f.Ensure(Ahead(context.Background()), o.url(), Want{})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "no room below cache_low") {
		t.Fatalf("a prefetched file the budget has no room for: %v", err)
	}
	if len(asked) != 1 || asked[0] != 1<<20 {
		t.Errorf("PrefetchRoom asked for %v; want once, for the file's %d bytes", asked, 1<<20)
	}
	if _, err := os.Stat(catalog.CachePathFor(f.CacheDir, o.url())); err == nil {
		t.Errorf("the refused prefetch's file is in the cache")
	}
	// The same file for a job is fetched, the budget not asked.
	asked = nil
	mustEnsure(t, f, o.url(), Want{})
	if len(asked) != 0 {
		t.Errorf("a job's fetch asked PrefetchRoom for %v", asked)
	}
	if _, err := os.Stat(filepath.Join(f.CacheDir)); err != nil {
		t.Fatal(err)
	}
}
