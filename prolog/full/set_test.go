package full

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
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
