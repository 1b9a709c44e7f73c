package full

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

// TestSetThroughTheAgent: a model of several files is ensured file by file
// through the node's agent into one set directory, under the files' own
// names, each file pinned on its own; when the origin changes, a job on
// another node fails naming the file, through the agent as in-process.
func TestSetThroughTheAgent(t *testing.T) {
	ctx := context.Background()
	a := append([]byte("GGUF\x03\x00\x00\x00"), bytes.Repeat([]byte("first bytes "), 4096)...)
	b := append([]byte("GGUF\x03\x00\x00\x00"), bytes.Repeat([]byte("other bytes "), 4096)...)
	c := newPinCluster(t, a)
	set := api.Model{Name: "m", Files: []api.File{
		{Source: c.origin.URL + "/w-00001-of-00002.gguf"},
		{Source: c.origin.URL + "/w-00002-of-00002.gguf"},
	}}
	if _, err := c.admin.PutModel(ctx, set); err != nil {
		t.Fatal(err)
	}
	n1, log1 := c.node("n1")
	c.agentFor("n1", n1)
	rec, err := run(t, n1, "n1", "1", "m")
	if err != nil || strings.Contains(log1.String(), "no agent") {
		t.Fatalf("fetch through the agent: %v; log:\n%s", err, log1)
	}
	dir := catalog.SetDir(n1.Config.CacheDir, set)
	if rec.Path != dir+"/w-00001-of-00002.gguf" || rec.Set != catalog.SetName(set) {
		t.Errorf("record %+v; want the first part in %s", rec, dir)
	}
	for _, name := range []string{"w-00001-of-00002.gguf", "w-00002-of-00002.gguf", catalog.SetManifest} {
		if _, err := os.Stat(dir + "/" + name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	m := c.model("m")
	for _, f := range m.Files {
		if f.Pinned != hexSum(a) {
			t.Errorf("file %s pinned to %q; want %s", f.Source, f.Pinned, hexSum(a))
		}
	}
	c.body.Store(&b)
	n2, log2 := c.node("n2")
	c.agentFor("n2", n2)
	_, err = run(t, n2, "n2", "2", "m")
	for _, want := range []string{"w-00001-of-00002.gguf", hexSum(a), hexSum(b), "llmgw models repin m"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("changed bytes through the agent: %v; want it to name %q; log:\n%s", err, want, log2)
		}
	}
	// Repinned, the next fetch pins each file anew.
	if err := c.admin.Repin(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, n2, "n2", "3", "m"); err != nil {
		t.Fatalf("after repin: %v", err)
	}
	for _, f := range c.model("m").Files {
		if f.Pinned != hexSum(b) {
			t.Errorf("after repin, file %s pinned to %q; want %s", f.Source, f.Pinned, hexSum(b))
		}
	}
}

// TestSetOldAgent: an agent older than the whole-set ensure (still running
// after an upgrade of the package) refuses the request's files, as it
// decodes strictly; the Prolog then asks it for each file in turn, as
// before, and the job gets its set.
func TestSetOldAgent(t *testing.T) {
	var hits atomic.Int64
	body := append([]byte("GGUF\x03\x00\x00\x00"), bytes.Repeat([]byte("old agent "), 1000)...)
	o := serve(t, body, &hits)
	set := catalog.Model{Name: "m", Files: []catalog.File{
		{Source: o.URL + "/w-00001-of-00002.gguf", SHA256: hexSum(body), Size: int64(len(body))},
		{Source: o.URL + "/w-00002-of-00002.gguf", SHA256: hexSum(body), Size: int64(len(body))},
	}}
	set.Source = set.Files[0].Source
	p, log, _ := newProlog(t, set)
	os.MkdirAll(filepath.Dir(p.Config.Socket), 0o755)
	l, err := net.Listen("unix", p.Config.Socket)
	if err != nil {
		t.Fatal(err)
	}
	var perFile atomic.Int64
	old := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Source string `json:"source"`
			SHA256 string `json:"sha256,omitempty"`
			Size   int64  `json:"size_bytes,omitempty"`
			Set    string `json:"set,omitempty"`
			Hub    any    `json:"hub,omitempty"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(api.Errorf(api.CodeInvalid, "ensure request: %v", err))
			return
		}
		perFile.Add(1)
		path, err := p.Fetcher.EnsureIn(r.Context(), req.Set, req.Source, fetch.Want{SHA256: req.SHA256, Size: req.Size})
		if err != nil {
			json.NewEncoder(w).Encode(api.EnsureEvent{Error: api.Errorf(api.CodeInternal, "%v", err)})
			return
		}
		json.NewEncoder(w).Encode(api.EnsureEvent{Path: path})
	})}
	go old.Serve(l)
	t.Cleanup(func() { old.Close() })

	p.Run(context.Background(), prolog.Job{ID: "1", Node: "n1", Model: "m"}, nil)
	rec, err := catalog.ReadJobRecord(p.Config.RunDir, "1")
	dir := catalog.SetDir(p.Config.CacheDir, set)
	if err != nil || rec.Error != "" || rec.Path != dir+"/w-00001-of-00002.gguf" {
		t.Fatalf("record = %+v, %v; want the set's first part; log:\n%s", rec, err, log)
	}
	if n := perFile.Load(); n != 2 {
		t.Errorf("the old agent was asked for %d files, want each of the 2", n)
	}
	if strings.Contains(log.String(), "no agent") {
		t.Errorf("the Prolog fetched in its own process; the old agent can fetch file by file:\n%s", log)
	}
}
