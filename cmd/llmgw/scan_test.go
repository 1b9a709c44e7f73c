package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/scan"
)

func scanCLIFile(t *testing.T, p string, size int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
}

func TestScanCommand(t *testing.T) {
	dir := t.TempDir()
	scanCLIFile(t, dir+"/llama/model.safetensors", 3<<30)
	scanCLIFile(t, dir+"/odd\nname.gguf", 10)
	scanCLIFile(t, dir+"/half/model.safetensors.part", 5)
	scanCLIFile(t, dir+"/README", 5)
	missing := dir + "/not-mounted"

	t.Run("table", func(t *testing.T) {
		code, out, errs := llmgwRun(t, nil, "scan", dir, missing)
		if code != 0 {
			t.Fatalf("llmgw scan = %d, want 0; stderr %s", code, errs)
		}
		for _, want := range []string{"PATH", dir + "/llama", "3.2 GB", "local", "complete", `"` + dir + `/odd\nname.gguf"`,
			dir + "/half", "incomplete: a download is still being written"} {
			if !strings.Contains(out, want) {
				t.Errorf("llmgw scan stdout lacks %q:\n%s", want, out)
			}
		}
		if strings.Count(out, "\n") != 4 {
			t.Errorf("llmgw scan printed %d lines, want a header and 3 rows (the odd name quoted onto one):\n%s", strings.Count(out, "\n"), out)
		}
		for _, want := range []string{missing + ": not there", "skipped " + dir + "/README: not weights"} {
			if !strings.Contains(errs, want) {
				t.Errorf("llmgw scan stderr lacks %q:\n%s", want, errs)
			}
		}
	})
	t.Run("json is the inventory", func(t *testing.T) {
		code, out, _ := llmgwRun(t, nil, "scan", "--json", dir, missing)
		if code != 0 {
			t.Fatalf("llmgw scan --json = %d, want 0", code)
		}
		var inv scan.Inventory
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&inv); err != nil {
			t.Fatalf("llmgw scan --json output does not decode: %v\n%s", err, out)
		}
		if len(inv.Weights) != 3 || len(inv.Dirs) != 2 || !inv.Dirs[1].Missing {
			t.Errorf("llmgw scan --json = %+v, want 3 weights and 2 dirs, the second missing", inv)
		}
		if inv.Weights[2].Path != dir+"/odd\nname.gguf" {
			t.Errorf("llmgw scan --json path = %q, want the name with its newline", inv.Weights[2].Path)
		}
	})
	t.Run("nothing found still exits 0", func(t *testing.T) {
		code, out, errs := llmgwRun(t, nil, "scan", missing)
		if code != 0 || out != "" || !strings.Contains(errs, "no weights found") {
			t.Errorf("llmgw scan MISSING = %d, %q, %q; want 0, nothing, a note", code, out, errs)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no dir", []string{"scan"}, "scan needs at least one DIR"},
		{"bad flag", []string{"scan", "--nope", dir}, "unknown flag"},
		{"bad timeout", []string{"scan", "--timeout", "0s", dir}, "--timeout must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := llmgwRun(t, nil, tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Errorf("llmgw %s = %d, %q; want 2 and %q", strings.Join(tc.args, " "), code, errs, tc.want)
			}
		})
	}
}

// TestScanWithCatalog: llmgw scan judges a Hugging Face snapshot of a
// catalog Hub model by the model's list, as the agent does (it read its
// catalog copy; the command did not, and called held snapshots
// incomplete): a selection without config.json (an adapter's, a GGUF's) needs none.
// --catalog names the copy; without it, the node's copy is used when it
// is there.
func TestScanWithCatalog(t *testing.T) {
	dir := t.TempDir()
	commit := strings.Repeat("c", 40)
	repo := filepath.Join(dir, "models--org--tiny")
	// A safetensors file of 4096 bytes: its header, then its one tensor.
	hdr := `{"w":{"dtype":"U8","shape":[4000],"data_offsets":[0,4000]}}`
	hdr += strings.Repeat(" ", 4096-8-4000-len(hdr))
	st := append(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))), hdr...)
	scanCLIFile(t, filepath.Join(repo, "blobs", strings.Repeat("a", 64)), 0)
	os.WriteFile(filepath.Join(repo, "blobs", strings.Repeat("a", 64)), append(st, make([]byte, 4000)...), 0o644)
	os.MkdirAll(filepath.Join(repo, "snapshots", commit), 0o755)
	os.Symlink("../../blobs/"+strings.Repeat("a", 64), filepath.Join(repo, "snapshots", commit, "m-Q4.safetensors"))
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644)
	h := &catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: commit, Files: []catalog.HubFile{{Path: "m-Q4.safetensors", Size: 4096, SHA256: strings.Repeat("a", 64)}}}
	cp := filepath.Join(t.TempDir(), "catalog.json")
	if err := catalog.WriteCopy(cp, catalog.Copy{Models: []catalog.Model{{Name: "tiny", Source: catalog.HubSource(h.Repo, commit), Hub: h}}}); err != nil {
		t.Fatal(err)
	}
	complete := func(args ...string) (bool, string) {
		t.Helper()
		code, out, errs := llmgwRun(t, nil, append([]string{"scan", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("llmgw scan %v = %d: %s", args, code, errs)
		}
		var inv scan.Inventory
		if err := json.Unmarshal([]byte(out), &inv); err != nil || len(inv.Weights) != 1 {
			t.Fatalf("llmgw scan %v: %v\n%s", args, err, out)
		}
		return inv.Weights[0].Complete, inv.Weights[0].Problem
	}
	if ok, why := complete("--catalog", "", dir); ok {
		t.Errorf("without a catalog, a snapshot of safetensors with no config.json: complete; want it held to the rules (%s)", why)
	}
	if ok, why := complete("--catalog", cp, dir); !ok {
		t.Errorf("with the catalog naming its files: incomplete (%s); want complete, as the agent reports it", why)
	}
	if code, _, errs := llmgwRun(t, nil, "scan", "--catalog", filepath.Join(dir, "none.json"), dir); code == 0 || !strings.Contains(errs, "none.json") {
		t.Errorf("a --catalog that cannot be read: %d, %s; want an error naming it", code, errs)
	}
}
