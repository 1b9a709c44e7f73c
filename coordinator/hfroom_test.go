package coordinator

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestPlacementHubModelChecksHFCacheRoom: a node whose Hugging Face cache
// is on a filesystem of its own (a filer, a scratch disk) has a Hub
// model's fetch checked against that cache's room, not the fetch cache's
// (issue 25's known gap: placement sent a 10 GB Hub model to a node whose
// hf_cache had 1 GB free, because its llmgw cache had 500 GB); another
// model's fetch is still checked against the fetch cache. The room
// survives the coordinator's reload of its state.
func TestPlacementHubModelChecksHFCacheRoom(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ReportInterval: 10 * time.Second}, testTokens)
	h := &catalog.Hub{Repo: "org/big", Revision: "main", Commit: strings.Repeat("c", 40), Files: []catalog.HubFile{
		{Path: "config.json", Size: 100, Blob: strings.Repeat("b", 40)},
		{Path: "model.safetensors", Size: 10e9, SHA256: strings.Repeat("a", 64)},
	}}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "big", Hub: h}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "gguf", Source: "https://origin.example/m.gguf", Size: 10e9}); err != nil {
		t.Fatal(err)
	}
	// As the agent sends it, spelt as JSON so that the test says what is
	// on the wire.
	for node, hf := range map[string]string{
		"n1": `,"hf_cache":{"dir":"/shared/hf","free_bytes":1000000000,"total_bytes":2000000000000}`,
		"n2": ``,
	} {
		body := `{"id":"` + node + `-1","seq":1,"started":"2026-01-01T00:00:00Z","time":"2026-01-01T00:00:00Z","node":"` + node +
			`","fabric":"ib-a","looked":true,"weights":[],"agent_version":"test",` +
			`"cache":{"dir":"/var/cache/llmgw","free_bytes":500000000000,"total_bytes":900000000000}` + hf + `}`
		if err := e.agent.Do(ctx, http.MethodPost, "/v1/reports", json.RawMessage(body), nil); err != nil {
			t.Fatalf("report from %s: %v", node, err)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, tc := range []struct{ model, node, result, says string }{
			{"big", "n1", api.CheckFail, "its Hugging Face cache has only 1.0 GB free"},
			{"big", "n2", api.CheckPass, "its cache has 500 GB free"},
			{"gguf", "n1", api.CheckPass, "its cache has 500 GB free"},
		} {
			p, err := e.anon.Placement(ctx, api.PlacementQuery{Model: tc.model})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range p.Nodes {
				if n.Node == tc.node && (n.Disk.Result != tc.result || !strings.Contains(n.Disk.Reason, tc.says)) {
					t.Errorf("%s: %s on %s: disk %s (%s); want %s, saying %q", when, tc.model, tc.node, n.Disk.Result, n.Disk.Reason, tc.result, tc.says)
				}
			}
		}
		st, ok := e.srv.ModelStatus("big", e.srv.now())
		if !ok {
			t.Fatal("no status for big")
		}
		for _, n := range st.Nodes {
			if n.Node == "n1" && n.CacheFree != 1e9 {
				t.Errorf("%s: status of big on n1 says %d bytes free where it is fetched; want the Hugging Face cache's 1e9", when, n.CacheFree)
			}
		}
	}
	check("after the reports")
	if err := e.srv.view.load(ctx, e.db); err != nil {
		t.Fatal(err)
	}
	check("after a reload from the database")
}
