package coordinator

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/coordinator/store"
)

// llmgwBinary builds the llmgw command into a temp dir, or returns
// $LLMGW_BIN when set (CI builds it once).
func llmgwBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("LLMGW_BIN"); bin != "" {
		return bin
	}
	if testing.Short() {
		t.Skip("builds the llmgw binary; run without -short, or set LLMGW_BIN")
	}
	bin := filepath.Join(t.TempDir(), "llmgw")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/llmgw/llmgw/cmd/llmgw")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// startCoordinator runs `llmgw coordinator` and waits until it is ready.
func startCoordinator(t *testing.T, bin, dir, addr string) *process {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(dir, "coordinator.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "coordinator", "--listen", addr, "--db", filepath.Join(dir, "c.db"),
		"--admin-token-file", filepath.Join(dir, "admin.token"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "LLMGW_CONFIG=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(dir, "coordinator.log"))
			t.Fatalf("coordinator exited: %v\n%s", p.err, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("coordinator not ready after 20 s")
		}
	}
}

// TestKill9DuringReports kills the coordinator with SIGKILL in the middle
// of a stream of reports and restarts it on the same file: the database
// opens and passes an integrity check, the catalog is intact, every report
// that was answered 202 is there (an acked report is durable), and presence
// follows the next reports.
func TestKill9DuringReports(t *testing.T) {
	bin := llmgwBinary(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "admin.token"), []byte("admin-secret\n"), 0o600)
	addr := freeAddr(t)
	url := "http://" + addr
	ctx := context.Background()
	admin := &api.Client{BaseURL: url, Token: "admin-secret"}
	// Each node with its own token, which outlives the restart (the
	// database keeps the tokens' digests).
	agent := &api.Client{BaseURL: url, Auth: nodeAuthVia(admin), HTTP: &http.Client{Timeout: 5 * time.Second}}

	p := startCoordinator(t, bin, dir, addr)
	var catalog []api.Model
	for i := range 5 {
		m, err := admin.PutModel(ctx, api.Model{Name: fmt.Sprintf("m%d", i), Source: fmt.Sprintf("/lustre/m%d", i), Size: int64(i+1) * 1e9})
		if err != nil {
			t.Fatal(err)
		}
		catalog = append(catalog, m)
	}

	// Eight agents report as fast as they can; each remembers the last seq
	// the coordinator acknowledged.
	var acked sync.Map // node → seq
	var total atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for a := range 8 {
		wg.Go(func() {
			for seq := int64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				node := fmt.Sprintf("n%d-%d", a, seq%50)
				r := report(node, "ib-a", seq)
				r.Started = t0.Add(time.Duration(a) * time.Hour)
				for w := range 20 {
					r.Weights = append(r.Weights, api.Weight{Path: fmt.Sprintf("/lustre/m%d", (w+int(seq))%25), Size: 1e9, Shared: true, Complete: true})
				}
				if _, err := agent.PostReport(ctx, r); err == nil {
					acked.Store(node, seq)
					total.Add(1)
				}
			}
		})
	}
	deadline := time.Now().Add(15 * time.Second)
	for total.Load() < 300 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	close(stop)
	wg.Wait()
	if total.Load() < 300 {
		t.Fatalf("only %d reports acknowledged before the kill", total.Load())
	}
	t.Logf("%d reports acknowledged before SIGKILL", total.Load())

	p = startCoordinator(t, bin, dir, addr)
	got, err := admin.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(catalog) {
		t.Fatalf("after the restart the catalog has %d models, want %d", len(got), len(catalog))
	}
	for i := range got {
		if got[i].Name != catalog[i].Name || got[i].Source != catalog[i].Source || !got[i].Created.Equal(catalog[i].Created) {
			t.Errorf("catalog entry %d = %+v, want %+v", i, got[i], catalog[i])
		}
	}

	// Presence follows the next report: n0-1 now sees only m4.
	r := report("n0-1", "ib-a", 1<<40)
	r.Started = t0
	r.Weights = []api.Weight{{Path: "/lustre/m4", Size: 5e9, Shared: true, Complete: true}}
	if _, err := agent.PostReport(ctx, r); err != nil {
		t.Fatal(err)
	}
	st, err := admin.ModelStatus(ctx, "m4")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Node == "n0-1" && n.Holds != api.HoldShared {
			t.Errorf("n0-1 after its new report: %+v; want it holding m4", n)
		}
	}

	// SIGTERM is a clean stop.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("coordinator exit on SIGTERM: %v, want status 0", p.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("coordinator did not stop within 15 s of SIGTERM")
	}

	db, err := store.Open(ctx, filepath.Join(dir, "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.IntegrityCheck(ctx); err != nil {
		t.Fatal(err)
	}
	nodes, err := db.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int64{}
	for _, n := range nodes {
		stored[n.Name] = n.Seq
	}
	acked.Range(func(k, v any) bool {
		node, seq := k.(string), v.(int64)
		if node == "n0-1" {
			return true
		}
		if stored[node] < seq {
			t.Errorf("node %s: seq %d was acknowledged but seq %s is stored", node, seq, strconv.FormatInt(stored[node], 10))
		}
		return true
	})
}
