package full

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/hub"
	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

// TestPrologHubOldAgent: an agent older than Hub models (still running
// after an upgrade of the package) refuses the ensure's hub field, as it
// decodes strictly; the Prolog says so and fetches the model in its own
// process, into the node's Hugging Face cache, rather than fail the job.
func TestPrologHubOldAgent(t *testing.T) {
	h, err := hubtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	commit := h.Commit("org/tiny", "main", map[string][]byte{"config.json": []byte("{}"), "model.safetensors": []byte("weights")})
	hb, _, err := (&hub.Client{Endpoint: h.URL}).Model(context.Background(), "org/tiny", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := catalog.Model{Name: "tiny", Source: catalog.HubSource(hb.Repo, hb.Commit), Hub: &hb}
	p, log, _ := newProlog(t, m)
	p.Fetcher.HFEndpoint = h.URL

	// The old agent: what its decodeEnsure answered a field it did not know.
	os.MkdirAll(filepath.Dir(p.Config.Socket), 0o755)
	l, err := net.Listen("unix", p.Config.Socket)
	if err != nil {
		t.Fatal(err)
	}
	old := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Source string `json:"source"`
			SHA256 string `json:"sha256,omitempty"`
			Size   int64  `json:"size_bytes,omitempty"`
			Set    string `json:"set,omitempty"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(api.Errorf(api.CodeInvalid, "ensure request: %v", err))
			return
		}
		t.Errorf("the old agent was asked to fetch %s", req.Source)
	})}
	go old.Serve(l)
	t.Cleanup(func() { old.Close() })

	p.Run(context.Background(), prolog.Job{ID: "1", Node: "n1", Model: "tiny"}, nil)
	rec, err := catalog.ReadJobRecord(p.Config.RunDir, "1")
	snap := catalog.HubSnapshotDir(p.Config.HFCacheDir(), "org/tiny", commit)
	if err != nil || rec.Error != "" || rec.Path != snap || rec.HFCache != p.Config.HFCacheDir() || !rec.HFOffline {
		t.Fatalf("record = %+v, %v; want the snapshot %s; log:\n%s", rec, err, snap, log)
	}
	if !strings.Contains(log.String(), "older than Hub models") {
		t.Errorf("the log does not say the agent is old:\n%s", log)
	}
	if b, err := os.ReadFile(filepath.Join(snap, "model.safetensors")); err != nil || string(b) != "weights" {
		t.Errorf("model.safetensors: %q, %v", b, err)
	}
}
