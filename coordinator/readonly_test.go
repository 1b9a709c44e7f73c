package coordinator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// watchEvery is store's: how often the store looks at its files.
const watchEvery = 100 * time.Millisecond

// TestReadOnlyUnderRunningCoordinator makes the database read-only under a
// coordinator that is serving a stream of reports, as a filesystem
// remounted read-only does (chattr +i on the database, its WAL and its
// shared-memory file): /readyz must say 503 at its next probe, the
// process must not die (twice, on main, it died of SIGBUS inside sqlite),
// and once the files are writable again /readyz is 200 and reports are
// stored again.
func TestReadOnlyUnderRunningCoordinator(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chattr +i needs root")
	}
	bin := llmgwBinary(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "admin.token"), []byte("admin-secret\n"), 0o600)
	addr := freeAddr(t)
	url := "http://" + addr
	ctx := context.Background()
	admin := &api.Client{BaseURL: url, Token: "admin-secret"}
	agent := &api.Client{BaseURL: url, Auth: nodeAuthVia(admin), HTTP: &http.Client{Timeout: 5 * time.Second}}
	p := startCoordinator(t, bin, dir, addr)
	if _, err := admin.PutModel(ctx, api.Model{Name: "m0", Source: "/lustre/m0", Size: 1e9}); err != nil {
		t.Fatal(err)
	}
	for a := range 4 {
		if _, err := agent.PostReport(ctx, report(fmt.Sprintf("n%d", a), "ib-a", 1)); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{}
	for _, s := range []string{"", "-wal", "-shm"} {
		if _, err := os.Stat(filepath.Join(dir, "c.db"+s)); err == nil {
			files = append(files, filepath.Join(dir, "c.db"+s))
		}
	}
	freeze := func() {
		if out, err := exec.Command("chattr", append([]string{"+i"}, files...)...).CombinedOutput(); err != nil {
			t.Skipf("chattr +i: %v %s", err, out)
		}
	}
	unfreeze := func() { exec.Command("chattr", append([]string{"-i"}, files...)...).Run() }
	t.Cleanup(unfreeze)
	ready := func() (int, string) {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			select {
			case <-p.done:
				log, _ := os.ReadFile(filepath.Join(dir, "coordinator.log"))
				t.Fatalf("the coordinator died: %v\n%s", p.err, crashOf(string(log)))
			case <-time.After(200 * time.Millisecond):
			}
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// A quiet coordinator: no report fails first, so only the probe can
	// tell. One probe after the change must.
	freeze()
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot be written") {
		t.Errorf("/readyz at the first probe after the database went read-only = %d %s; want 503 saying it cannot be written", code, body)
	}
	unfreeze()
	waitReady := func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body := ready()
			if code == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz = %d %s 10 s after the database became writable again; want 200", code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReady()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for a := range 4 {
		wg.Go(func() {
			for seq := int64(2); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				r := report(fmt.Sprintf("n%d", a), "ib-a", seq)
				for w := range 50 {
					r.Weights = append(r.Weights, api.Weight{Path: fmt.Sprintf("/lustre/x%d-%d", w, seq), Size: 1e9, Shared: true, Complete: true})
				}
				agent.PostReport(ctx, r)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(500 * time.Millisecond)

	freeze()
	// Reports keep failing for a while; the coordinator must live through it.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(dir, "coordinator.log"))
			t.Fatalf("the coordinator died with the database read-only: %v\n%s", p.err, crashOf(string(log)))
		case <-time.After(100 * time.Millisecond):
		}
		if code, _ := ready(); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz = %d while the database is read-only; want 503", code)
			break
		}
	}
	unfreeze()
	time.Sleep(2 * watchEvery)
	if _, err := agent.PostReport(ctx, report("n0", "ib-a", 1<<40)); err != nil {
		t.Errorf("a report after the database became writable again: %v", err)
	}
	waitReady()
	select {
	case <-p.done:
		t.Fatalf("the coordinator exited: %v", p.err)
	default:
	}
}

// crashOf is the part of a log that says how a process died: from the
// first line naming a signal or a panic, 40 lines.
func crashOf(log string) string {
	lines := strings.Split(log, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "SIG") || strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			return strings.Join(lines[i:min(len(lines), i+40)], "\n")
		}
	}
	if len(log) > 3000 {
		return log[len(log)-3000:]
	}
	return log
}
