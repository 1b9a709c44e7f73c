package catalog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// copySeeds are catalog copies as the agent writes them, and the ways a
// file can differ from that: decodeCopy must read each as json.Unmarshal
// does, or decline.
func copySeeds(t testing.TB) [][]byte {
	full := Copy{Coordinator: "http://coord:8420/x?a=1&b=<2>", Fetched: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Models: []Model{
		{Name: "a", Source: "/m/a.gguf"},
		{Name: "b", Source: "hf:org/repo@rev/b.gguf", Size: 1 << 40, SHA256: strings.Repeat("ab", 32), GPUMemory: 80 << 30,
			Created: time.Date(2025, 5, 6, 7, 8, 9, 0, time.FixedZone("x", 3600)), Updated: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Name: "c", Source: "https://h/é\u2028/\x01\"\\\t.gguf", Size: -1},
		{Name: "d", Source: "hf:o/r/d-00001-of-00002.gguf", Size: 10, Files: []File{
			{Source: "hf:o/r/d-00001-of-00002.gguf", Size: 4, SHA256: strings.Repeat("cd", 32)},
			{Source: "https://h/d-00002-of-00002.gguf?x=1", Size: 6, Pinned: strings.Repeat("ef", 32), PinnedETag: "\"e\""},
		}},
		{Name: "e", Source: HubSource("org/tiny", strings.Repeat("a1", 20)), Size: 9, Hub: &Hub{Repo: "org/tiny", Revision: "main",
			Commit: strings.Repeat("a1", 20), Include: []string{"*.py"}, Exclude: []string{"original/**"}, Files: []HubFile{
				{Path: "config.json", Size: 2, Blob: strings.Repeat("b2", 20)},
				{Path: "sub/model.safetensors", Size: 7, SHA256: strings.Repeat("c3", 32)},
			}}},
		{Name: "f", Source: HubSource("o/r", strings.Repeat("d4", 20)), Hub: &Hub{Repo: "o/r", Revision: "v1", Commit: strings.Repeat("d4", 20),
			Listed: true, Files: []HubFile{}}},
	}, CatalogID: "0123456789abcdef0123456789abcdef", Generation: 7, TrustedID: "fedcba", TrustedGeneration: 1 << 40}
	var seeds [][]byte
	for _, c := range []Copy{{}, {Models: []Model{}}, full} {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		ind, _ := json.MarshalIndent(c, "", "  ")
		seeds = append(seeds, b, ind)
	}
	for _, s := range []string{
		`{}`, `null`, `[]`, `""`, `{"models":null}`, `{"models":[null]}`, `{"models":[{"name":null,"size_bytes":null}]}`,
		`{"Models":[{"name":"a"}]}`, `{"models":[{"NAME":"a","name":"b"}]}`, `{"models":[{"name":"a","name":"b"}]}`,
		`{"models":[],"models":[{"name":"a"}]}`, `{"coordinator":"a"} x`, `{"coordinator":"a"}{}`, `{"coordinator":"\ud800"}`,
		`{"coordinator":"\ud83d\ude00\u00e9\/\b\f\n\r\t"}`, "{\"coordinator\":\"\xff\"}", `{"coordinator":"\x"}`,
		`{"models":[{"size_bytes":1.0}]}`, `{"models":[{"size_bytes":1e3}]}`, `{"models":[{"size_bytes":-0}]}`,
		`{"models":[{"size_bytes":01}]}`, `{"models":[{"size_bytes":9223372036854775808}]}`, `{"models":[{"size_bytes":"1"}]}`,
		`{"models":[{"created":"2026-13-01T00:00:00Z"}]}`, `{"models":[{"created":"bad"}]}`, `{"models":[{"created":5}]}`,
		`{"fetched":"2026-01-01T00:00:00.123456789+02:00"}`, `{"fetched":null}`, `{"fetched":"\u0032026-01-01T00:00:00Z"}`,
		`{"other":{"a":[1,-2.5e-3,true,false,null,"x",{}]},"models":[{"name":"a","extra":[]}]}`, `{"ſource":1}`,
		`{"other":01}`, `{"other":1.}`, `{"other":tru}`, `{"models":[{"name":"a"},]}`, `{"models":[{"name":"a"}`,
		`{"models":[{"name":"a"}]`, `{"models":[{"files":[{"source":"a","other":[1]}]}]}`, `{"models":[{"files":null}]}`,
		`{"models":[{"files":[null]}]}`, `{"models":[{"files":[{"size_bytes":"1"}]}]}`,
		`{"models":[{"hub":null}]}`, `{"models":[{"hub":{}}]}`, `{"models":[{"hub":{"files":null,"listed":false}}]}`,
		`{"models":[{"hub":{"listed":1}}]}`, `{"models":[{"hub":{"include":[null]}}]}`, `{"models":[{"hub":{"files":[{"path":"a","x":{}}]}}]}`,
		`{"models":[{"hub":{"Files":[{"PATH":"a"}]}}]}`, `{"models":[{"hub":{"commit":"x","commit":"y"}}]}`, `{"models":[{"hub":[]}]}`, `{"coordinator":"a",}`, `{,}`, `{"a" 1}`, ` { "models" : [ { "name" : "a" } ] } `,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

func checkDecodeCopy(t *testing.T, b []byte) {
	got, ok := decodeCopy(b)
	if !ok {
		return
	}
	var want Copy
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("decodeCopy(%q) accepted what json.Unmarshal rejects: %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeCopy(%q) = %#v, json.Unmarshal gives %#v", b, got, want)
	}
}

func TestDecodeCopy(t *testing.T) {
	for _, b := range copySeeds(t) {
		checkDecodeCopy(t, b)
	}
	// What the agent writes must take the fast way, or the hook pays for
	// encoding/json again without anyone noticing.
	for _, b := range copySeeds(t)[:6] {
		if _, ok := decodeCopy(b); !ok {
			t.Errorf("decodeCopy declined a copy as WriteCopy writes it: %s", b)
		}
	}
	for _, s := range []string{`{"coordinator":"\ud83d\ude00\u00e9\/\b\f\n\r\t"}`, `{"other":{"a":[1,-2.5e-3,true,false,null,"x",{}]},"models":[{"name":"a","extra":[]}]}`, `{"models":null}`} {
		if _, ok := decodeCopy([]byte(s)); !ok {
			t.Errorf("decodeCopy declined %s", s)
		}
	}
}

func FuzzDecodeCopy(f *testing.F) {
	for _, b := range copySeeds(f) {
		f.Add(b)
	}
	f.Fuzz(checkDecodeCopy)
}

func checkMarshalJobRecord(t *testing.T, r JobRecord) {
	got, gerr := marshalJobRecord(r)
	want, werr := json.Marshal(r)
	if string(got) != string(want) || (gerr == nil) != (werr == nil) {
		t.Fatalf("marshalJobRecord(%#v) = %s, %v; json.Marshal gives %s, %v", r, got, gerr, want, werr)
	}
}

func TestMarshalJobRecord(t *testing.T) {
	for _, r := range []JobRecord{
		{},
		{Job: "42", Model: "m", Source: "hf:o/r/f.gguf", Path: "/var/cache/llmgw/0123-f.gguf", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)},
		{Job: "1_2+3", Model: "m", Error: "fetch <x> & \"y\"\n\t\x01\x7f é \u2028\u2029 \xff\xfe", Time: time.Now()},
		{Job: "43", Model: "m", Source: "hf:o/r/f-00001-of-00002.gguf", Set: "0123456789abcdef-f.set", Path: "/c/0123456789abcdef-f.set/f-00001-of-00002.gguf", Time: time.Unix(5, 0).UTC()},
		{Job: "44", Model: "m", Source: "hf:o/r@" + strings.Repeat("a", 40), Path: "/c/hub/models--o--r/snapshots/" + strings.Repeat("a", 40), HFCache: "/c/hub", HFOffline: true, Time: time.Unix(6, 0).UTC()},
		{Job: "45", Model: "m", HFCache: "/c/<hub>", Time: time.Unix(6, 0).UTC()},
		{Job: "1", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Job: "1", Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -5*3600))},
	} {
		checkMarshalJobRecord(t, r)
	}
}

func FuzzMarshalJobRecord(f *testing.F) {
	f.Add("42", "m", "hf:o/r/f.gguf", "/p", "", int64(0), int64(1767225600))
	f.Add("", "<&>", "\u2028", "\xff", "a\x00b", int64(-1)<<62, int64(1)<<40)
	f.Fuzz(func(t *testing.T, job, model, source, path, errText string, nsec, sec int64) {
		checkMarshalJobRecord(t, JobRecord{Job: job, Model: model, Source: source, Path: path, Error: errText, Time: time.Unix(sec, nsec)})
		checkMarshalJobRecord(t, JobRecord{Job: job, Path: path, HFCache: source, HFOffline: nsec%2 == 0, Time: time.Unix(sec, nsec)})
	})
}

// TestReadCopySlowWay: a copy decodeCopy declines is read by encoding/json
// as before.
func TestReadCopySlowWay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.json")
	b := []byte(`{"Models":[{"Name":"a","source":"/m/a.gguf","size_bytes":1e3}]}`)
	if _, ok := decodeCopy(b); ok {
		t.Fatal("decodeCopy read case-folded names; this test needs a copy it declines")
	}
	os.WriteFile(path, b, 0o644)
	if _, err := ReadCopy(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadCopy(size 1e3) = %v, want encoding/json's error naming the file", err)
	}
	b = []byte(`{"Models":[{"Name":"a","source":"/m/a.gguf","size_bytes":1000}]}`)
	os.WriteFile(path, b, 0o644)
	cp, err := ReadCopy(path)
	if m, ok := cp.Lookup("a"); err != nil || !ok || m.Source != "/m/a.gguf" || m.Size != 1000 {
		t.Errorf("ReadCopy(declined copy) = %+v, %v", cp, err)
	}
}

// TestWriteJobRecord: the record is replaced whole, readable by the job's
// user, and leaves no temporary file.
func TestWriteJobRecord(t *testing.T) {
	run := t.TempDir()
	for _, r := range []JobRecord{{Job: "7", Model: "m", Error: "x"}, {Job: "7", Model: "m", Path: "/p", Time: time.Unix(1, 0).UTC()}} {
		if err := WriteJobRecord(run, r); err != nil {
			t.Fatal(err)
		}
		got, err := ReadJobRecord(run, "7")
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("ReadJobRecord = %+v, %v; want %+v", got, err, r)
		}
	}
	ents, _ := os.ReadDir(JobsDir(run))
	if len(ents) != 1 {
		t.Errorf("jobs dir holds %v, want the record alone", ents)
	}
	if st, err := os.Stat(filepath.Join(JobsDir(run), "7.json")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("record mode: %v, %v; want 0644", st.Mode(), err)
	}
}
