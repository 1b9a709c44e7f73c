package scan

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// TestScanSet: a directory llmgw fetches a model of several files into is
// held only with every file its manifest lists, whole, even when the
// names carry no -of-N that would tell (a checkpoint and its config); its
// files, renamed there only whole by the fetcher, need not settle.
func TestScanSet(t *testing.T) {
	root := t.TempDir()
	m := catalog.Model{Name: "m", Files: []catalog.File{
		{Source: "hf:org/repo/model.safetensors"},
		{Source: "hf:org/repo/config.json", Size: 20},
	}}
	if err := catalog.WriteManifest(root, m); err != nil {
		t.Fatal(err)
	}
	dir := catalog.SetDir(root, m)
	testFile(t, filepath.Join(dir, "model.safetensors"), 100)
	// Fetched just now: a set's files are the fetcher's, whole on arrival.
	now := time.Now()
	os.Chtimes(filepath.Join(dir, "model.safetensors"), now, now)

	l, ok := scanOne(t, root)[dir]
	if !ok || l.Complete || !strings.Contains(l.Problem, "config.json (missing, one of the files of the set") {
		t.Fatalf("the set without config.json: %+v (reported %v); want incomplete, naming config.json", l, ok)
	}
	testWrite(t, filepath.Join(dir, "config.json"), `{"model_type":"x"}`) // 18 bytes, not the 20 the set wants
	if l := scanOne(t, root)[dir]; l.Complete || !strings.Contains(l.Problem, "config.json (18 bytes, the set wants 20)") {
		t.Errorf("the set with a short config.json: %+v; want incomplete, naming it", l)
	}
	testWrite(t, filepath.Join(dir, "config.json"), `{"model_type":"xyz"}`)
	if l := scanOne(t, root)[dir]; !l.Complete || l.Problem != "" {
		t.Errorf("the whole set: %+v; want complete", l)
	}
	os.WriteFile(filepath.Join(dir, catalog.SetManifest), []byte("{"), 0o644)
	if l := scanOne(t, root)[dir]; l.Complete || !strings.Contains(l.Problem, "set manifest") {
		t.Errorf("a set whose manifest is torn: %+v; want incomplete, saying so", l)
	}
}
