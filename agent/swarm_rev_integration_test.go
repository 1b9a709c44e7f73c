//go:build integration

package agent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// TestSwarmHubRoomClaimedWhole: a revision whose files do not fit
// together on the node's cache is refused before its first byte, saying
// so: nothing is read from the Hub and no .part is left. Twelve files that
// fit one by one would otherwise fill the disk at the seventh and leave
// six behind. On a real small filesystem (a 6 MiB tmpfs), as root:
//
//	sudo GOTOOLCHAIN=go1.27.3 go test -tags integration -run TestSwarmHubRoomClaimedWhole ./agent/
func TestSwarmHubRoomClaimedWhole(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting tmpfs needs root")
	}
	mnt := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	x := newHubFabric(t, twelveFiles(), 191, 192)
	base := x.hub.Served()
	a := x.agent(191, 0, mnt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := x.ensure(ctx, a)
	if !errors.Is(err, fetch.ErrNoSpace) || !strings.Contains(err.Error(), "claimed whole before its first byte") {
		t.Fatalf("ensure of a %d-byte revision on 6 MiB: %v; want refused for space, before the first byte", x.size, err)
	}
	if n := x.hub.Served() - base; n != 0 {
		t.Errorf("the Hub served %d bytes of a revision that could not fit", n)
	}
	filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), catalog.PartSuffix) {
			t.Errorf("%s left behind", p)
		}
		return nil
	})
}
