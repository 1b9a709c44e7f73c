package scan

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Helpers that build real trees in t.TempDir().

func testFile(t *testing.T, p string, size int64) {
	t.Helper()
	testFileAs(t, p, size, p)
}

// testFileAs is testFile for a file read under another name (as): a blob
// of an HF cache, which its snapshot links as a .gguf or .safetensors.
func testFileAs(t *testing.T, p string, size int64, as string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: a "70 GB" shard costs nothing on disk.
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	// The header a whole file of its format starts with, where it fits:
	// the scan reads it (header.go). A .gguf gets GGUF's; anything else
	// (a blob an HF snapshot links as .safetensors) an empty safetensors
	// header, padded to fill the file.
	if h := testHeader(as, size); h != nil {
		if _, err := f.WriteAt(h, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	settled(t, p)
}

// settled dates a fixture a minute back: it stands for a finished file,
// and one modified within Options.Settle is still being written.
func settled(t *testing.T, p string) {
	t.Helper()
	then := time.Now().Add(-time.Minute)
	if err := os.Chtimes(p, then, then); err != nil {
		t.Fatal(err)
	}
}

func testHeader(p string, size int64) []byte {
	if strings.HasSuffix(strings.ToLower(p), ".gguf") {
		if size < 24 {
			return nil
		}
		return append([]byte("GGUF\x03\x00\x00\x00"), make([]byte, 16)...)
	}
	if size < 10 {
		return nil
	}
	n := min(size-8, 1<<10)
	h := binary.LittleEndian.AppendUint64(nil, uint64(n))
	return append(append(h, "{}"...), bytes.Repeat([]byte(" "), int(n)-2)...)
}

func testWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	settled(t, p)
}

func testMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func testLink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func testIndex(shards ...string) string {
	m := map[string]string{}
	for i, s := range shards {
		m[fmt.Sprintf("layer.%d.weight", i)] = s
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": m})
	return string(b)
}

// testHF lays out one hub cache model the way huggingface_hub does:
// contents in blobs/, snapshots/<rev>/NAME a relative symlink into blobs.
// files maps NAME to size; a negative size makes the link dangle.
func testHF(t *testing.T, hub, id, rev string, files map[string]int64) string {
	t.Helper()
	repo := filepath.Join(hub, "models--"+strings.ReplaceAll(id, "/", "--"))
	snap := filepath.Join(repo, "snapshots", rev)
	testMkdir(t, snap)
	testWrite(t, filepath.Join(repo, "refs", "main"), rev)
	for name, size := range files {
		blob := fmt.Sprintf("%x", name+rev)
		if size >= 0 {
			testFileAs(t, filepath.Join(repo, "blobs", blob), size, name)
		}
		rel, _ := filepath.Rel(filepath.Dir(filepath.Join(snap, name)), filepath.Join(repo, "blobs", blob))
		testLink(t, rel, filepath.Join(snap, name))
	}
	return snap
}

type wantLocal struct {
	rel      string // path relative to the scanned dir
	size     int64  // -1: not checked
	complete bool
	problem  string // substring of Problem
	modelID  string
	revision string
}

func checkInventory(t *testing.T, root string, inv Inventory, want []wantLocal, skips map[string]string) {
	t.Helper()
	got := map[string]Local{}
	for _, l := range inv.Weights {
		rel, err := filepath.Rel(root, l.Path)
		if err != nil {
			t.Fatal(err)
		}
		got[rel] = l
	}
	for _, w := range want {
		l, ok := got[w.rel]
		if !ok {
			t.Errorf("Scan: %q not reported; got %+v (skipped %+v)", w.rel, inv.Weights, inv.Dirs[0].Skipped)
			continue
		}
		delete(got, w.rel)
		if w.size >= 0 && l.Size != w.size {
			t.Errorf("Scan: %q size = %d, want %d", w.rel, l.Size, w.size)
		}
		if l.Complete != w.complete {
			t.Errorf("Scan: %q complete = %v (problem %q), want %v", w.rel, l.Complete, l.Problem, w.complete)
		}
		if !strings.Contains(l.Problem, w.problem) || (w.complete && l.Problem != "") {
			t.Errorf("Scan: %q problem = %q, want one containing %q", w.rel, l.Problem, w.problem)
		}
		if l.ModelID != w.modelID || l.Revision != w.revision {
			t.Errorf("Scan: %q model = %q@%q, want %q@%q", w.rel, l.ModelID, l.Revision, w.modelID, w.revision)
		}
	}
	for rel, l := range got {
		t.Errorf("Scan: unexpected weights %q: %+v", rel, l)
	}
	skipped := map[string]string{}
	for _, s := range inv.Dirs[0].Skipped {
		rel, _ := filepath.Rel(root, s.Path)
		skipped[rel] = s.Reason
	}
	for rel, reason := range skips {
		r, ok := skipped[rel]
		if !ok {
			t.Errorf("Scan: %q not in Skipped %+v", rel, inv.Dirs[0].Skipped)
		} else if !strings.Contains(r, reason) {
			t.Errorf("Scan: %q skipped for %q, want a reason containing %q", rel, r, reason)
		}
	}
}

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, root string)
		want  []wantLocal
		skips map[string]string // rel → reason substring
	}{
		{
			name: "single weight files of every kind",
			build: func(t *testing.T, root string) {
				testFile(t, root+"/a.gguf", 1000)
				testFile(t, root+"/b.safetensors", 10)
				testFile(t, root+"/c.bin", 11)
				testFile(t, root+"/d.pt", 12)
				testFile(t, root+"/e.pth", 13)
				testFile(t, root+"/F.GGUF", 34)
			},
			want: []wantLocal{
				{"a.gguf", 1000, true, "", "", ""}, {"b.safetensors", 10, true, "", "", ""},
				{"c.bin", 11, true, "", "", ""}, {"d.pt", 12, true, "", "", ""},
				{"e.pth", 13, true, "", "", ""}, {"F.GGUF", 34, true, "", "", ""},
			},
		},
		{
			name: "notes, empty directories and partial downloads are not weights",
			build: func(t *testing.T, root string) {
				testWrite(t, root+"/README.md", "my models")
				testMkdir(t, root+"/half-finished")
				testWrite(t, root+"/configs/config.json", "{}")
				testFile(t, root+"/big.gguf.part", 500)
				testFile(t, root+"/m.safetensors.incomplete", 500)
				testFile(t, root+"/x.gguf.partial-123", 500)
				if err := syscall.Mkfifo(root+"/pipe.gguf", 0o644); err != nil {
					t.Fatal(err)
				}
			},
			skips: map[string]string{
				"README.md":                "not weights",
				"half-finished":            "empty directory",
				"configs":                  "no weight files",
				"big.gguf.part":            "still being written",
				"m.safetensors.incomplete": "still being written",
				"x.gguf.partial-123":       "still being written",
				"pipe.gguf":                "not a regular file",
			},
		},
		{
			name: "a directory counts every file in it, at any depth",
			build: func(t *testing.T, root string) {
				testFile(t, root+"/llama/model.safetensors", 1000)
				testWrite(t, root+"/llama/config.json", "{}")
				testFile(t, root+"/deep/a/b/c/weights.pt", 40)
				testWrite(t, root+"/deep/notes.txt", "hello")
			},
			want: []wantLocal{
				{"llama", 1002, true, "", "", ""},
				{"deep", 45, true, "", "", ""},
			},
		},
		{
			name: "a directory named like a weight file is judged by its content",
			build: func(t *testing.T, root string) {
				testWrite(t, root+"/x.gguf/notes.txt", "not weights")
				testFile(t, root+"/y.gguf/real.gguf", 77)
			},
			want:  []wantLocal{{"y.gguf", 77, true, "", "", ""}},
			skips: map[string]string{"x.gguf": "no weight files"},
		},
		{
			name: "an empty weight file is incomplete",
			build: func(t *testing.T, root string) {
				testFile(t, root+"/zero.gguf", 0)
				testFile(t, root+"/dir/model.safetensors", 0)
			},
			want: []wantLocal{
				{"zero.gguf", 0, false, "empty file", "", ""},
				{"dir", 0, false, "model.safetensors (empty)", "", ""},
			},
		},
		{
			name: "a sharded checkpoint is complete only with every shard its index lists",
			build: func(t *testing.T, root string) {
				idx := testIndex("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors")
				for _, d := range []string{"full", "missing", "empty"} {
					testWrite(t, root+"/"+d+"/model.safetensors.index.json", idx)
					testFile(t, root+"/"+d+"/model-00001-of-00003.safetensors", 100)
					testFile(t, root+"/"+d+"/model-00002-of-00003.safetensors", 100)
				}
				testFile(t, root+"/full/model-00003-of-00003.safetensors", 100)
				testFile(t, root+"/empty/model-00003-of-00003.safetensors", 0)
				// An index in a subdirectory (diffusers' layout) is relative to itself.
				testWrite(t, root+"/diffusers/unet/diffusion_pytorch_model.safetensors.index.json",
					testIndex("diffusion_pytorch_model-00001-of-00002.safetensors", "diffusion_pytorch_model-00002-of-00002.safetensors"))
				testFile(t, root+"/diffusers/unet/diffusion_pytorch_model-00001-of-00002.safetensors", 15)
				testFile(t, root+"/diffusers/unet/diffusion_pytorch_model-00002-of-00002.safetensors", 15)
				// pytorch .bin shards, and a shard without a weight extension.
				testWrite(t, root+"/bins/pytorch_model.bin.index.json", testIndex("pytorch_model-00001-of-00002.bin", "shard-two"))
				testFile(t, root+"/bins/pytorch_model-00001-of-00002.bin", 5)
				testFile(t, root+"/bins/shard-two", 5)
			},
			want: []wantLocal{
				{"full", -1, true, "", "", ""},
				{"missing", -1, false, "model-00003-of-00003.safetensors (missing, listed in model.safetensors.index.json)", "", ""},
				{"empty", -1, false, "model-00003-of-00003.safetensors (empty)", "", ""},
				{"diffusers", -1, true, "", "", ""},
				{"bins", -1, true, "", "", ""},
			},
		},
		{
			name: "a broken or hostile index makes the directory incomplete",
			build: func(t *testing.T, root string) {
				testWrite(t, root+"/truncated/model.safetensors.index.json", `{"weight_map": {"a": "model-0000`)
				testFile(t, root+"/truncated/model-00001-of-00002.safetensors", 5)
				testWrite(t, root+"/nomap/model.safetensors.index.json", `{"metadata": {}}`)
				testFile(t, root+"/nomap/model-00001-of-00002.safetensors", 5)
				testWrite(t, root+"/escape/model.safetensors.index.json", testIndex("../../etc/passwd"))
				testFile(t, root+"/escape/model.safetensors", 5)
			},
			want: []wantLocal{
				{"truncated", -1, false, "not valid JSON", "", ""},
				{"nomap", -1, false, "lists no shards", "", ""},
				{"escape", -1, false, "outside the model", "", ""},
			},
		},
		{
			name: "a split GGUF is one model, complete only with all its parts",
			build: func(t *testing.T, root string) {
				for i := 1; i <= 3; i++ {
					testFile(t, fmt.Sprintf("%s/qwen-q4-%05d-of-00003.gguf", root, i), 100)
				}
				testFile(t, root+"/half-00001-of-00002.gguf", 100)
				testFile(t, root+"/tail-00002-of-00002.gguf", 100)
				testFile(t, root+"/zero-00001-of-00002.gguf", 100)
				testFile(t, root+"/zero-00002-of-00002.gguf", 0)
				testFile(t, root+"/dir/m-00001-of-00002.gguf", 1)
			},
			want: []wantLocal{
				{"qwen-q4-00001-of-00003.gguf", 300, true, "", "", ""},
				{"half-00001-of-00002.gguf", 100, false, "half-00002-of-00002.gguf (missing)", "", ""},
				{"tail-00001-of-00002.gguf", 100, false, "tail-00001-of-00002.gguf (missing)", "", ""},
				{"zero-00001-of-00002.gguf", 100, false, "zero-00002-of-00002.gguf (empty)", "", ""},
				{"dir", 1, false, "m-00002-of-00002.gguf (missing part of a split GGUF)", "", ""},
			},
		},
		{
			name: "a download still being written inside a directory makes it incomplete",
			build: func(t *testing.T, root string) {
				testFile(t, root+"/fetching/model-00001-of-00002.safetensors", 10)
				testFile(t, root+"/fetching/model-00002-of-00002.safetensors.part", 3)
				// huggingface-cli download --local-dir keeps its partials here.
				testFile(t, root+"/localdir/model.safetensors", 10)
				testFile(t, root+"/localdir/.cache/huggingface/download/model.safetensors.abc.incomplete", 3)
				// rsync's temporary name for a file it is still receiving.
				testFile(t, root+"/rsyncing/a.safetensors", 10)
				testFile(t, root+"/rsyncing/.b.safetensors.Xy12Zq", 3)
				// Nothing finished yet at all.
				testFile(t, root+"/only-part/model.gguf.part", 3)
			},
			want: []wantLocal{
				{"fetching", 13, false, "still being written (model-00002-of-00002.safetensors.part)", "", ""},
				{"localdir", 13, false, "still being written", "", ""},
				{"rsyncing", 13, false, "still being written (.b.safetensors.Xy12Zq)", "", ""},
				{"only-part", 3, false, "no finished weight file yet", "", ""},
			},
		},
		{
			name: "the configured directory is a Hugging Face hub cache",
			build: func(t *testing.T, root string) {
				testHF(t, root, "Qwen/Qwen2.5-0.5B", "a09a3545", map[string]int64{"model.safetensors": 1000, "config.json": 10})
				testHF(t, root, "Qwen/Qwen2.5-0.5B", "b1c2d3e4", map[string]int64{"model.safetensors": 2000, "config.json": 10})
				testHF(t, root, "gpt2", "e7da7f22", map[string]int64{
					"model.safetensors.index.json": -1, "model-00001-of-00002.safetensors": 5, "model-00002-of-00002.safetensors": 5, "config.json": 10})
				testHF(t, root, "meta/Broken", "0000aaaa", map[string]int64{"model.safetensors": -1, "config.json": 3})
				testHF(t, root, "org/configs-only", "1111", map[string]int64{"config.json": 3})
				testMkdir(t, root+"/models--org--never-started/blobs")
				testFile(t, root+"/datasets--org--data/snapshots/abc/train.bin", 100)
				testWrite(t, root+"/version.txt", "1")
				testMkdir(t, root+"/.locks/models--gpt2")
			},
			want: []wantLocal{
				{"models--Qwen--Qwen2.5-0.5B/snapshots/a09a3545", 1010, true, "", "Qwen/Qwen2.5-0.5B", "a09a3545"},
				{"models--Qwen--Qwen2.5-0.5B/snapshots/b1c2d3e4", 2010, true, "", "Qwen/Qwen2.5-0.5B", "b1c2d3e4"},
				// The index's blob is missing here: its link dangles.
				{"models--gpt2/snapshots/e7da7f22", 20, false, "model.safetensors.index.json (dangling symlink", "gpt2", "e7da7f22"},
				{"models--meta--Broken/snapshots/0000aaaa", 3, false, "model.safetensors (dangling symlink", "meta/Broken", "0000aaaa"},
			},
			skips: map[string]string{
				"models--org--configs-only/snapshots/1111": "no weight files yet",
				"models--org--never-started":               "no snapshots",
				"datasets--org--data":                      "not a model",
				"version.txt":                              "not weights",
				".locks":                                   "lock files",
			},
		},
		{
			name: "a hub cache one level down is recognised too",
			build: func(t *testing.T, root string) {
				testHF(t, root+"/hub", "Qwen/Qwen2.5-7B", "abc", map[string]int64{"model.gguf": 42})
				testWrite(t, root+"/hub/version.txt", "1")
			},
			want:  []wantLocal{{"hub/models--Qwen--Qwen2.5-7B/snapshots/abc", 42, true, "", "Qwen/Qwen2.5-7B", "abc"}},
			skips: map[string]string{"hub/version.txt": "not a model"},
		},
		{
			name: "symlinks are followed, loops are not",
			build: func(t *testing.T, root string) {
				// Within the configured directory: links out of it are not
				// followed (TestScanSymlinksStayInside).
				elsewhere := root + "/.elsewhere"
				testFile(t, elsewhere+"/store/llama.gguf", 300)
				testFile(t, elsewhere+"/store/qwen/model.safetensors", 400)
				testLink(t, elsewhere+"/store/llama.gguf", root+"/llama.gguf")
				testLink(t, elsewhere+"/store/qwen", root+"/qwen")
				testLink(t, "gone.gguf", root+"/dangling.gguf")
				testLink(t, "loop", root+"/loop")
				testLink(t, ".", root+"/self")
				// Inside a model: a link back up must not be walked forever,
				// and a link to a shard elsewhere counts its target's size.
				testFile(t, root+"/m/a.safetensors", 10)
				testLink(t, "..", root+"/m/up")
				testLink(t, "../../m", root+"/m/sub/again")
				testLink(t, elsewhere+"/store/llama.gguf", root+"/m/linked.gguf")
				testLink(t, "nowhere", root+"/n/dangling.safetensors")
				testFile(t, root+"/n/ok.safetensors", 1)
			},
			want: []wantLocal{
				{".elsewhere", 700, true, "", "", ""},
				{"llama.gguf", 300, true, "", "", ""},
				{"qwen", 400, true, "", "", ""},
				{"m", 310, true, "", "", ""},
				{"n", 1, false, "dangling.safetensors (dangling symlink", "", ""},
			},
			skips: map[string]string{
				"dangling.gguf": "dangling symlink",
				"loop":          "symlink loop",
				"self":          "symlink loop",
			},
		},
		{
			name: "names with newlines and invalid UTF-8 are kept as they are",
			build: func(t *testing.T, root string) {
				testFile(t, root+"/two\nlines.gguf", 25)
				testFile(t, root+"/bad\xff\xfename.safetensors", 16)
				testFile(t, root+"/dir\nx/\x80.bin", 7)
			},
			want: []wantLocal{
				{"two\nlines.gguf", 25, true, "", "", ""},
				{"bad\xff\xfename.safetensors", 16, true, "", "", ""},
				{"dir\nx", 7, true, "", "", ""},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.build(t, root)
			inv := Scan(context.Background(), []string{root}, Options{})
			if len(inv.Dirs) != 1 || inv.Dirs[0].Err != "" || inv.Dirs[0].Missing {
				t.Fatalf("Scan(%s).Dirs = %+v, want one readable dir", root, inv.Dirs)
			}
			checkInventory(t, root, inv, tc.want, tc.skips)
			for i := 1; i < len(inv.Weights); i++ {
				if inv.Weights[i-1].Path >= inv.Weights[i].Path {
					t.Errorf("Scan: weights not sorted: %q before %q", inv.Weights[i-1].Path, inv.Weights[i].Path)
				}
			}
			b, err := json.Marshal(inv)
			if err != nil || !json.Valid(b) {
				t.Errorf("json.Marshal(inventory) = %q, %v; want valid JSON", b, err)
			}
		})
	}
}

func TestScanDirs(t *testing.T) {
	root := t.TempDir()
	testFile(t, root+"/a/x.gguf", 1)
	testFile(t, root+"/b/y.gguf", 2)
	testFile(t, root+"/a-file", 3)
	missing := root + "/not-mounted-yet"

	t.Run("missing directories are noted, not errors, and order and duplicates are kept straight", func(t *testing.T) {
		inv := Scan(context.Background(), []string{root + "/b", missing, root + "/a/", "", root + "/a", root + "/b/../b"}, Options{})
		var gotDirs []string
		for _, d := range inv.Dirs {
			gotDirs = append(gotDirs, d.Path)
		}
		if want := []string{root + "/b", missing, root + "/a"}; !reflect.DeepEqual(gotDirs, want) {
			t.Errorf("Scan dirs = %q, want %q", gotDirs, want)
		}
		if d := inv.Dirs[1]; !d.Missing || d.Err != "" {
			t.Errorf("Scan(%s) = %+v, want Missing and no error", missing, d)
		}
		var got []string
		for _, l := range inv.Weights {
			got = append(got, l.Path)
		}
		if want := []string{root + "/a/x.gguf", root + "/b/y.gguf"}; !reflect.DeepEqual(got, want) {
			t.Errorf("Scan weights = %q, want %q", got, want)
		}
		if inv.Dirs[0].FSType == "" {
			t.Errorf("Scan(%s).FSType is empty", root+"/b")
		}
	})
	t.Run("a file configured as a directory is an error naming it", func(t *testing.T) {
		inv := Scan(context.Background(), []string{root + "/a-file"}, Options{})
		if d := inv.Dirs[0]; !strings.Contains(d.Err, "not a directory") {
			t.Errorf("Scan(a file).Dirs[0] = %+v, want a not-a-directory error", d)
		}
	})
	t.Run("relative directories are reported absolute", func(t *testing.T) {
		t.Chdir(root)
		inv := Scan(context.Background(), []string{"a"}, Options{})
		if len(inv.Weights) != 1 || inv.Weights[0].Path != root+"/a/x.gguf" {
			t.Errorf("Scan(a) = %+v, want %s/a/x.gguf", inv.Weights, root)
		}
	})
	t.Run("a cancelled context scans nothing and says so", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		inv := Scan(ctx, []string{root + "/a"}, Options{})
		if len(inv.Weights) != 0 || !strings.Contains(inv.Dirs[0].Err, "canceled") {
			t.Errorf("Scan(cancelled) = %+v, want no weights and a cancelled error", inv)
		}
	})
}

// A node with nothing configured must rank exactly like a node that looked
// and found nothing: the two weights lists are the same, down to their JSON.
func TestScanNothingEqualsEmpty(t *testing.T) {
	none := Scan(context.Background(), nil, Options{})
	empty := Scan(context.Background(), []string{t.TempDir()}, Options{})
	missing := Scan(context.Background(), []string{"/nonexistent/llmgw-test"}, Options{})
	for name, inv := range map[string]Inventory{"an empty dir": empty, "a missing dir": missing} {
		if !reflect.DeepEqual(none.Weights, inv.Weights) {
			t.Errorf("Scan(nil).Weights = %#v, Scan(%s).Weights = %#v; want equal", none.Weights, name, inv.Weights)
		}
		a, _ := json.Marshal(none.Weights)
		b, _ := json.Marshal(inv.Weights)
		if string(a) != string(b) || string(a) != "[]" {
			t.Errorf("weights JSON: nothing configured %s, %s %s; want both []", a, name, b)
		}
	}
	if none.Dirs == nil {
		t.Error("Scan(nil).Dirs is nil; want empty, so it encodes as []")
	}
}

// 5,000 here, because creating the files is what takes the time; the
// integration test and scripts/bench/scan.sh use 100,000.
func TestScanManyEntries(t *testing.T) {
	testManyEntries(t, 5_000)
}

func testManyEntries(t *testing.T, n int) {
	root := t.TempDir()
	for i := range n {
		f, err := os.Create(fmt.Sprintf("%s/note-%06d.txt", root, i))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	testFile(t, root+"/model.gguf", 5)
	inv := Scan(context.Background(), []string{root}, Options{})
	d := inv.Dirs[0]
	if len(inv.Weights) != 1 || d.SkippedCount != n || len(d.Skipped) != DefaultMaxSkipped {
		t.Fatalf("Scan(%d notes + 1 model) = %d weights, %d skipped (%d listed); want 1, %d (%d listed)",
			n, len(inv.Weights), d.SkippedCount, len(d.Skipped), n, DefaultMaxSkipped)
	}
	// The list has DefaultMaxSkipped entries (checked above, fatally): the
	// first and the last of the first by name.
	if d.Skipped[0].Path != root+"/note-000000.txt" || d.Skipped[len(d.Skipped)-1].Path != fmt.Sprintf("%s/note-%06d.txt", root, DefaultMaxSkipped-1) {
		t.Errorf("Scan listed skips %q .. %q, want the first %d by name", d.Skipped[0].Path, d.Skipped[len(d.Skipped)-1].Path, DefaultMaxSkipped)
	}
	inv = Scan(context.Background(), []string{root}, Options{MaxSkipped: -1})
	if d := inv.Dirs[0]; len(d.Skipped) != 0 || d.SkippedCount != n {
		t.Errorf("Scan(MaxSkipped -1) listed %d, counted %d; want 0, %d", len(d.Skipped), d.SkippedCount, n)
	}
}

func TestScanTooDeep(t *testing.T) {
	root := t.TempDir()
	p := root + "/deep"
	for range maxDepth + 5 {
		p += "/d"
	}
	testFile(t, root+"/deep/top.safetensors", 1)
	testFile(t, p+"/bottom.safetensors", 1)
	inv := Scan(context.Background(), []string{root}, Options{})
	if len(inv.Weights) != 1 || inv.Weights[0].Complete || !strings.Contains(inv.Weights[0].Problem, "directories deep") {
		t.Errorf("Scan(too deep) = %+v, want one incomplete weights saying it is too deep", inv.Weights)
	}
}

// The tree changes under the scan: a model is deleted between the listing
// of its parent and the reading of it, and a subdirectory of another one.
func TestScanRemovedMidScan(t *testing.T) {
	root := t.TempDir()
	testFile(t, root+"/going/model.gguf", 1)
	testFile(t, root+"/shrinking/model.gguf", 1)
	testFile(t, root+"/shrinking/sub/more.gguf", 1)
	testFile(t, root+"/staying.gguf", 31)
	afterList = func(dir string) {
		switch dir {
		case root:
			os.RemoveAll(root + "/going")
		case root + "/shrinking":
			os.RemoveAll(root + "/shrinking/sub")
		}
	}
	t.Cleanup(func() { afterList = nil })
	inv := Scan(context.Background(), []string{root}, Options{Workers: 1})
	checkInventory(t, root, inv, []wantLocal{
		{"staying.gguf", 31, true, "", "", ""},
		{"shrinking", -1, false, "sub/ (removed while the scan ran)", "", ""},
	}, map[string]string{"going": "removed while the scan ran"})
}

// Running as an ordinary user, an unreadable model directory and an
// unreadable configured directory are reported, not fatal. Root reads
// everything, so as root the test runs itself again as nobody.
func TestScanUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		rerunAsNobody(t, "TestScanUnreadable")
		return
	}
	base := os.Getenv("LLMGW_SCAN_TEST_DIR")
	if base == "" {
		base = t.TempDir()
	}
	root := base + "/models"
	testFile(t, root+"/ok.gguf", 31)
	testFile(t, root+"/locked/model.gguf", 1)
	testFile(t, root+"/partly/model.gguf", 1)
	testFile(t, root+"/partly/private/more.gguf", 1)
	testFile(t, base+"/closed/x.gguf", 1)
	for _, p := range []string{root + "/locked", root + "/partly/private", base + "/closed"} {
		if err := os.Chmod(p, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(p, 0o755) })
	}
	inv := Scan(context.Background(), []string{root, base + "/closed"}, Options{})
	checkInventory(t, root, inv, []wantLocal{
		{"ok.gguf", 31, true, "", "", ""},
		{"partly", 1, false, "private/ (unreadable: permission denied)", "", ""},
	}, map[string]string{"locked": "cannot read it: permission denied"})
	if d := inv.Dirs[1]; !strings.Contains(d.Err, "permission denied") {
		t.Errorf("Scan(unreadable dir).Dirs[1] = %+v, want a permission denied error", d)
	}
}

// rerunAsNobody runs one test of this binary again as uid/gid 65534,
// in a directory nobody can use.
func rerunAsNobody(t *testing.T, name string) {
	t.Helper()
	if os.Getenv("LLMGW_SCAN_TEST_DIR") != "" {
		t.Fatal("still root after dropping privileges")
	}
	dir, err := os.MkdirTemp("", "llmgw-scan-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// The test binary sits in a directory only root can enter: copy it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	exe = dir + "/scan.test"
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := runAs(exe, []string{"-test.run=^" + name + "$", "-test.v"}, append(os.Environ(), "LLMGW_SCAN_TEST_DIR="+dir))
	if err != nil {
		if strings.Contains(string(out), "permission denied") && !strings.Contains(string(out), "=== RUN") {
			t.Skipf("cannot run the test binary as nobody (%v); run this test as an ordinary user", err)
		}
		t.Fatalf("%s as nobody: %v\n%s", name, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("%s as nobody did not pass:\n%s", name, out)
	}
}

func TestScanStuckMount(t *testing.T) {
	root := t.TempDir()
	stuck := root + "/stuck"
	testMkdir(t, stuck)
	testFile(t, root+"/ok/model.gguf", 1)

	release := make(chan struct{})
	calls := make(chan string, 10)
	real := readRootFunc
	readRootFunc = func(ctx context.Context, dir string, opt Options) result {
		calls <- dir
		if dir == stuck {
			<-release // a read the kernel never answers
		}
		return real(ctx, dir, opt)
	}
	t.Cleanup(func() { readRootFunc = real })
	opt := Options{DirTimeout: 100 * time.Millisecond}

	start := time.Now()
	inv := Scan(context.Background(), []string{stuck, root + "/ok"}, opt)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Scan with a stuck dir took %s, want about the timeout", took)
	}
	if d := inv.Dirs[0]; !strings.Contains(d.Err, "not answering after 100ms") {
		t.Errorf("stuck dir = %+v, want a not-answering error", d)
	}
	if len(inv.Weights) != 1 || inv.Weights[0].Path != root+"/ok/model.gguf" {
		t.Errorf("weights beside a stuck dir = %+v, want the other dir's model", inv.Weights)
	}

	// Later scans do not start another goroutine to block beside the first.
	for range 3 {
		start = time.Now()
		inv = Scan(context.Background(), []string{stuck}, opt)
		if took := time.Since(start); took > opt.DirTimeout/2 {
			t.Errorf("Scan of a dir still stuck took %s, want an immediate answer", took)
		}
		if d := inv.Dirs[0]; !strings.Contains(d.Err, "still not answering") {
			t.Errorf("dir still stuck = %+v, want a still-not-answering error", d)
		}
	}
	if n := countCalls(calls, stuck); n != 1 {
		t.Errorf("stuck dir was read %d times, want once", n)
	}

	// Once the mount answers, the next scan reads it afresh.
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		inflight.Lock()
		_, running := inflight.m[stuck]
		inflight.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the released scan never finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
	inv = Scan(context.Background(), []string{stuck}, opt)
	if d := inv.Dirs[0]; d.Err != "" || d.Missing {
		t.Errorf("recovered dir = %+v, want a clean scan", d)
	}
}

func countCalls(calls chan string, dir string) int {
	n := 0
	for {
		select {
		case d := <-calls:
			if d == dir {
				n++
			}
		default:
			return n
		}
	}
}

// Concurrent scans of one directory share a single read of it.
func TestScanConcurrentShare(t *testing.T) {
	root := t.TempDir()
	testFile(t, root+"/m/model.gguf", 9)
	gate := make(chan struct{})
	var reads atomic.Int32
	real := readRootFunc
	readRootFunc = func(ctx context.Context, dir string, opt Options) result {
		reads.Add(1)
		<-gate
		return real(ctx, dir, opt)
	}
	t.Cleanup(func() { readRootFunc = real })
	results := make(chan Inventory, 4)
	for range 4 {
		go func() { results <- Scan(context.Background(), []string{root}, Options{}) }()
	}
	// The read is held at the gate until all four scans wait on one run.
	for joined, give := 0, time.Now().Add(10*time.Second); joined < 4; {
		inflight.Lock()
		if run := inflight.m[root]; run != nil {
			joined = run.callers
		}
		inflight.Unlock()
		if time.Now().After(give) {
			close(gate)
			t.Fatalf("%d of 4 concurrent scans wait on the one read; want all of them to share it", joined)
		}
		runtime.Gosched()
	}
	close(gate)
	for range 4 {
		inv := <-results
		if len(inv.Weights) != 1 || inv.Weights[0].Size != 9 {
			t.Errorf("shared scan = %+v, want the one model", inv.Weights)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("4 concurrent scans read the dir %d times, want once, shared", n)
	}
}

func TestScanNameRules(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		weight, partial, index bool
		splitPrefix            string
		splitPart, splitTotal  int
	}{
		{name: "model.gguf", weight: true},
		{name: "Model.SafeTensors", weight: true},
		{name: "notes.txt"},
		{name: "model.gguf.part", partial: true},
		{name: "model.safetensors.incomplete", partial: true},
		{name: "abc-model.gguf.part.ranges", partial: true},
		{name: ".model.gguf.AbC123", partial: true},
		{name: ".hidden.gguf", weight: true},
		{name: ".model.gguf.toolong1"},
		{name: "model.safetensors.index.json", index: true},
		{name: "pytorch_model.bin.index.json", index: true},
		{name: "tokenizer.json"},
		{name: "qwen-00001-of-00003.gguf", weight: true, splitPrefix: "qwen", splitPart: 1, splitTotal: 3},
		{name: "a-b-00003-of-00003.GGUF", weight: true, splitPrefix: "a-b", splitPart: 3, splitTotal: 3},
		{name: "qwen-00004-of-00003.gguf", weight: true},
		{name: "qwen-0001-of-00003.gguf", weight: true},
		{name: "model-00001-of-00003.safetensors", weight: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := catalog.IsWeightName(tc.name); got != tc.weight {
				t.Errorf("catalog.IsWeightName(%q) = %v, want %v", tc.name, got, tc.weight)
			}
			if got := catalog.IsPartialName(tc.name); got != tc.partial {
				t.Errorf("catalog.IsPartialName(%q) = %v, want %v", tc.name, got, tc.partial)
			}
			if got := isIndexName(tc.name); got != tc.index {
				t.Errorf("isIndexName(%q) = %v, want %v", tc.name, got, tc.index)
			}
			p, part, total, ok := splitGGUF(tc.name)
			if ok != (tc.splitTotal > 0) || p != tc.splitPrefix || part != tc.splitPart || total != tc.splitTotal {
				t.Errorf("splitGGUF(%q) = %q, %d, %d, %v; want %q, %d, %d", tc.name, p, part, total, ok, tc.splitPrefix, tc.splitPart, tc.splitTotal)
			}
		})
	}
}

func TestScanHFModelID(t *testing.T) {
	for name, want := range map[string]string{
		"models--Qwen--Qwen2.5-7B-Instruct": "Qwen/Qwen2.5-7B-Instruct",
		"models--gpt2":                      "gpt2",
		"models--":                          "",
		"models--a--b--c":                   "",
		"models----x":                       "",
		"datasets--a--b":                    "",
	} {
		got, ok := hfModelID(name)
		if got != want || ok != (want != "") {
			t.Errorf("hfModelID(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func TestScanFSKind(t *testing.T) {
	for _, tc := range []struct {
		magic  uint32
		name   string
		shared bool
	}{
		{0x6969, "nfs", true},
		{0x0BD00BD0, "lustre", true},
		{0x47504653, "gpfs", true},
		{0x00C36400, "ceph", true},
		{0x65735546, "fuse", true},
		{0xFF534D42, "cifs", true},
		{0xFE534D42, "smb2", true},
		{0xEF53, "ext4", false},
		{0x58465342, "xfs", false},
		{0x01021994, "tmpfs", false},
		{0x794C7630, "overlay", false},
		// Unknown is local: the conservative direction.
		{0x12345678, "0x12345678", false},
	} {
		name, shared := fsKind(tc.magic)
		if name != tc.name || shared != tc.shared {
			t.Errorf("fsKind(%#x) = %q, %v; want %q, %v", tc.magic, name, shared, tc.name, tc.shared)
		}
	}
}

// scanOne scans root and returns the weights by path.
func scanOne(t *testing.T, root string) map[string]Local {
	t.Helper()
	got := map[string]Local{}
	for _, l := range Scan(context.Background(), []string{root}, Options{}).Weights {
		got[l.Path] = l
	}
	return got
}

// TestScanHalfFinished: downloads stopped part way are not reported
// complete, whichever tool left them.
func TestScanHalfFinished(t *testing.T) {
	root := t.TempDir()
	// A plain directory holding the first of two safetensors shards and
	// no index: the -of-00002 name says a shard is missing.
	testFile(t, root+"/plain/model-00001-of-00002.safetensors", 100)
	// The whole set is complete.
	testFile(t, root+"/whole/model-00001-of-00002.safetensors", 100)
	testFile(t, root+"/whole/model-00002-of-00002.safetensors", 100)
	// An HF snapshot mid-download: 5 of 30 shard links, no index yet, and
	// the blob being written beside them.
	repo := root + "/models--org--big"
	snap := repo + "/snapshots/abc123"
	for i := 1; i <= 5; i++ {
		blob := fmt.Sprintf("%s/blobs/blob%02d", repo, i)
		testFile(t, blob, 100)
		testLink(t, "../../blobs/"+filepath.Base(blob), fmt.Sprintf("%s/model-%05d-of-00030.safetensors", snap, i))
	}
	testFile(t, repo+"/blobs/blob06.incomplete", 50)
	testFile(t, repo+"/blobs/config", 10)
	testLink(t, "../../blobs/config", snap+"/config.json")
	// Another repo whose download finished long ago, with no shards named
	// -of-: the only sign of a download in flight is the .incomplete blob.
	done := root + "/models--org--small"
	testFile(t, done+"/blobs/aaaa", 100)
	testLink(t, "../../blobs/aaaa", done+"/snapshots/def456/model.safetensors")
	testFile(t, done+"/blobs/bbbb.incomplete", 10)

	got := scanOne(t, root)
	for p, want := range map[string]string{
		root + "/plain":            "model-00002-of-00002.safetensors (missing part of a sharded set)",
		snap:                       "25 files missing or unusable",
		done + "/snapshots/def456": "blobs/bbbb.incomplete",
	} {
		if l, ok := got[p]; !ok || l.Complete || !strings.Contains(l.Problem, want) {
			t.Errorf("%s: %+v (reported %v); want incomplete, saying %q", p, l, ok, want)
		}
	}
	if l := got[snap]; !strings.Contains(l.Problem, "blobs/blob06.incomplete") {
		t.Errorf("%s: problem %q does not name the blob still being written", snap, l.Problem)
	}
	if l := got[root+"/whole"]; !l.Complete {
		t.Errorf("a whole -of- set: %+v", l)
	}
}

// TestScanHeaders: a weight file whose header says it is cut short, or
// that is no file of its format, is not complete; the verdict is kept per
// file and read again only when the file changes.
func TestScanHeaders(t *testing.T) {
	root := t.TempDir()
	testWrite(t, root+"/tiny.gguf", "GGUF\x03\x00\x00\x00") // 8 bytes
	testFile(t, root+"/zeros.gguf", 100)
	os.WriteFile(root+"/zeros.gguf", make([]byte, 100), 0o644)
	settled(t, root+"/zeros.gguf")
	hdr := `{"w":{"dtype":"U8","shape":[1000],"data_offsets":[0,1000]}}`
	short := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	short = append(append(short, hdr...), make([]byte, 400)...) // 600 of the 1000 data bytes missing
	testWrite(t, root+"/short.safetensors", string(short))
	whole := append(append([]byte{}, short...), make([]byte, 600)...)
	testWrite(t, root+"/whole.safetensors", string(whole))
	testWrite(t, root+"/liar.safetensors", string(binary.LittleEndian.AppendUint64(nil, 1<<40))+"{}")

	got := scanOne(t, root)
	for name, want := range map[string]string{
		"tiny.gguf":         "8 bytes, too short for a GGUF header",
		"zeros.gguf":        "no GGUF magic",
		"short.safetensors": fmt.Sprintf("announces %d bytes, the file holds %d", 8+len(hdr)+1000, len(short)),
		"liar.safetensors":  "announces 1099511627776 bytes of header",
	} {
		if l := got[root+"/"+name]; l.Complete || !strings.Contains(l.Problem, want) {
			t.Errorf("%s: %+v; want incomplete, saying %q", name, l, want)
		}
	}
	if l := got[root+"/whole.safetensors"]; !l.Complete {
		t.Errorf("a whole safetensors file: %+v", l)
	}
	// The tail arrives: the same name, now whole, is read again.
	testWrite(t, root+"/short.safetensors", string(whole))
	if l := scanOne(t, root)[root+"/short.safetensors"]; !l.Complete {
		t.Errorf("after the file was completed: %+v", l)
	}
}

// TestScanSymlinksStayInside: a symlink is followed only to somewhere a
// configured directory covers. `ln -s / rootfs` in a weights directory must not walk the
// whole machine and report it as a model.
func TestScanSymlinksStayInside(t *testing.T) {
	base := t.TempDir()
	root, other, outside := base+"/weights", base+"/more", base+"/elsewhere"
	testFile(t, outside+"/big/model.gguf", 1000)
	testFile(t, outside+"/loose.gguf", 100)
	testFile(t, other+"/shared/model.gguf", 200)
	testFile(t, root+"/real/model.gguf", 300)
	testLink(t, outside+"/big", root+"/ext")               // a directory outside
	testLink(t, outside+"/loose.gguf", root+"/loose.gguf") // a file outside
	testLink(t, root+"/real", root+"/alias")               // inside
	testLink(t, other+"/shared", root+"/linked")           // inside another configured directory
	testFile(t, root+"/mixed/model.gguf", 50)
	testLink(t, outside+"/loose.gguf", root+"/mixed/part.gguf")

	inv := Scan(context.Background(), []string{root, other}, Options{})
	got := map[string]Local{}
	for _, l := range inv.Weights {
		got[l.Path] = l
	}
	for _, p := range []string{root + "/ext", root + "/loose.gguf"} {
		if l, ok := got[p]; ok {
			t.Errorf("%s, a link out of the weight directories, was followed: %+v", p, l)
		}
	}
	for p, size := range map[string]int64{root + "/alias": 300, root + "/linked": 200} {
		if l := got[p]; !l.Complete || l.Size != size {
			t.Errorf("%s, a link inside: %+v; want it followed, %d bytes", p, l, size)
		}
	}
	if l := got[root+"/mixed"]; l.Complete || !strings.Contains(l.Problem, "outside the weight directories") {
		t.Errorf("a model with a shard linked from outside: %+v; want it incomplete, saying so", l)
	}
	skipped := map[string]string{}
	for _, s := range inv.Dirs[0].Skipped {
		skipped[s.Path] = s.Reason
	}
	if !strings.Contains(skipped[root+"/ext"], "outside the weight directories") {
		t.Errorf("skipped %v; want %s skipped as a link outside", skipped, root+"/ext")
	}
}

// TestScanSettle: a weight file modified within Options.Settle is still
// being written, not weights; one under a cache name is exempt (the
// fetcher renames a file there only once it is whole).
func TestScanSettle(t *testing.T) {
	root := t.TempDir()
	fresh := root + "/fresh.gguf"
	cached := root + "/" + catalog.CacheName("https://o.example/m.gguf")
	for _, p := range []string{fresh, cached, root + "/dir/model.gguf"} {
		testFile(t, p, 100)
		now := time.Now()
		os.Chtimes(p, now, now)
	}
	got := scanOne(t, root)
	for _, p := range []string{fresh, root + "/dir"} {
		if l := got[p]; l.Complete || !strings.Contains(l.Problem, "still being written?") {
			t.Errorf("%s, written just now: %+v; want incomplete", p, l)
		}
	}
	if l := got[cached]; !l.Complete {
		t.Errorf("a fetched file under its cache name, renamed just now: %+v", l)
	}
	inv := Scan(context.Background(), []string{root}, Options{Settle: -1})
	for _, l := range inv.Weights {
		if !l.Complete {
			t.Errorf("with Settle -1: %+v", l)
		}
	}
}

// TestTouchDoesNotFlap is item 6: a model stays held when only its mtime
// changed (a touch, an rsync that copied nothing) and its size is the one
// the last scan saw; on main it counted as "still being written?" until a
// scan after the settle time, a whole scan interval at the agent's pace,
// and jobs constrained to its feature pended meanwhile. A file seen
// growing between two scans, or never seen before, still settles.
func TestTouchDoesNotFlap(t *testing.T) {
	root := t.TempDir()
	model, growing := root+"/m.gguf", root+"/g.gguf"
	testFile(t, model, 4096)
	testFile(t, growing, 4096)
	long := time.Now().Add(-time.Hour)
	os.Chtimes(model, long, long)
	os.Chtimes(growing, long, long)
	mem := &Memory{}
	opt := Options{Settle: time.Minute, Memory: mem}
	scan := func() map[string]Local {
		got := map[string]Local{}
		for _, l := range Scan(context.Background(), []string{root}, opt).Weights {
			got[l.Path] = l
		}
		return got
	}
	if got := scan(); !got[model].Complete || !got[growing].Complete {
		t.Fatalf("the first scan: %+v", got)
	}
	// A touch of one; the other grows by a write.
	now := time.Now()
	os.Chtimes(model, now, now)
	f, _ := os.OpenFile(growing, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(make([]byte, 512))
	f.Close()
	got := scan()
	if l := got[model]; !l.Complete {
		t.Errorf("a model touched, its size as at the last scan: %+v; want it still held", l)
	}
	if l := got[growing]; l.Complete || !strings.Contains(l.Problem, "still being written?") {
		t.Errorf("a file seen growing between two scans: %+v; want it settling", l)
	}
	// A file never seen before settles, memory or not.
	fresh := root + "/new.gguf"
	testFile(t, fresh, 4096)
	os.Chtimes(fresh, time.Now(), time.Now())
	if l := scan()[fresh]; l.Complete {
		t.Errorf("a file never seen before, written just now: %+v; want it settling", l)
	}
}
