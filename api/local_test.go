package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveLocal serves h on a unix socket in a temp dir, as the agent does.
func serveLocal(t *testing.T, h http.Handler) *LocalClient {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return &LocalClient{Socket: sock}
}

func TestLocalClientEnsure(t *testing.T) {
	var gotReq EnsureRequest
	lc := serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/ensure" {
			http.Error(w, "wrong endpoint", 404)
			return
		}
		json.NewDecoder(r.Body).Decode(&gotReq)
		switch gotReq.Source {
		case "ok":
			io.WriteString(w, `{"progress":{"source":"ok","bytes_done":10,"bytes_total":20}}`+"\n")
			io.WriteString(w, "\n")
			io.WriteString(w, `{"progress":{"source":"ok","bytes_done":20,"bytes_total":20}}`+"\n")
			io.WriteString(w, `{"path":"/cache/abc-m.gguf"}`+"\n")
		case "fails":
			io.WriteString(w, `{"error":{"code":"not_found","message":"gone"}}`+"\n")
		case "refused":
			w.WriteHeader(400)
			io.WriteString(w, `{"code":"invalid","message":"sha256 is not hex"}`)
		case "proxy":
			w.WriteHeader(502)
			io.WriteString(w, "<html>bad gateway</html>")
		case "cut":
			io.WriteString(w, `{"progress":{"source":"cut","bytes_done":1,"bytes_total":-1}}`+"\n")
		case "garbage":
			io.WriteString(w, "hello\n")
		case "relative":
			io.WriteString(w, `{"path":"cache/x"}`+"\n")
		}
	}))

	var seen []int64
	p, err := lc.Ensure(context.Background(), EnsureRequest{Source: "ok", SHA256: "ab", Size: 20}, func(f Fetch) { seen = append(seen, f.Done) })
	if err != nil || p != "/cache/abc-m.gguf" {
		t.Fatalf("Ensure(ok) = %q, %v", p, err)
	}
	if len(seen) != 2 || seen[0] != 10 || seen[1] != 20 {
		t.Errorf("progress seen = %v, want [10 20]", seen)
	}
	if gotReq.SHA256 != "ab" || gotReq.Size != 20 {
		t.Errorf("request = %+v", gotReq)
	}

	for _, tc := range []struct {
		source   string
		code     string
		status   int
		contains string
	}{
		{source: "fails", code: CodeNotFound, contains: "gone"},
		{source: "refused", code: CodeInvalid, status: 400, contains: "sha256"},
		{source: "proxy", code: CodeInternal, status: 502, contains: "bad gateway"},
		{source: "cut", contains: "ended without a result"},
		{source: "garbage", contains: "bad event"},
		{source: "relative", contains: "relative path"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			_, err := lc.Ensure(context.Background(), EnsureRequest{Source: tc.source}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("Ensure(%s) = %v, want an error containing %q", tc.source, err, tc.contains)
			}
			if errors.Is(err, ErrNoAgent) {
				t.Errorf("Ensure(%s) error %v is ErrNoAgent, but the agent answered", tc.source, err)
			}
			var e *Error
			if tc.code != "" && (!errors.As(err, &e) || e.Code != tc.code || e.Status != tc.status) {
				t.Errorf("Ensure(%s) = %#v, want *Error code %s status %d", tc.source, err, tc.code, tc.status)
			}
		})
	}
}

func TestLocalClientNoAgent(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	for name, sock := range map[string]string{"no socket file": filepath.Join(dir, "missing.sock"), "nothing listening": stale} {
		t.Run(name, func(t *testing.T) {
			lc := &LocalClient{Socket: sock}
			if _, err := lc.Ensure(context.Background(), EnsureRequest{Source: "hf:a/b/c.gguf"}, nil); !errors.Is(err, ErrNoAgent) {
				t.Errorf("Ensure = %v, want ErrNoAgent", err)
			}
			if _, err := lc.Status(context.Background()); !errors.Is(err, ErrNoAgent) || !strings.Contains(err.Error(), sock) {
				t.Errorf("Status = %v, want ErrNoAgent naming the socket", err)
			}
		})
	}
}

func TestLocalClientStatusAndContext(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	lc := serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/status" {
			json.NewEncoder(w).Encode(AgentStatus{Node: "n1", Fabric: "ib-a", LastReport: ReportResult{OK: true, Seq: 4}})
			return
		}
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	st, err := lc.Status(context.Background())
	if err != nil || st.Node != "n1" || !st.LastReport.OK || st.LastReport.Seq != 4 {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := lc.Ensure(ctx, EnsureRequest{Source: "slow"}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ensure past its deadline = %v, want DeadlineExceeded", err)
	}
}
