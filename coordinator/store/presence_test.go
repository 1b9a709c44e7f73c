package store

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// TestWeightsFormat holds the hand-written encoder and fast decoder to
// encoding/json: the array must be what json.Marshal writes (so SQLite and
// people read it as documented), and decoding must give back every field,
// through the fast path for the store's own output and through the slow
// path for anything else.
func TestWeightsFormat(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ws     []api.Weight
		models []string
	}{
		{"none", nil, nil},
		{"plain", []api.Weight{
			{Path: "/lustre/llama", Size: 14 << 30, Shared: true, Complete: true},
			{Path: "/hub/models--Q--W/snapshots/abc", Size: 0, ModelID: "Q/W", Revision: "abc", Problem: "missing shard 2"},
		}, []string{"llama", ""}},
		{"text that needs escaping", []api.Weight{
			{Path: "/m/quote\"back\\slash\ttab\nnl\x01ctl", Size: -1, Problem: "<html> & é ☃"},
			{Path: "/m/bad-utf8-\xff\xfe", ModelID: "a\"b", Revision: "r\\"},
		}, []string{"name\"x", "é"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := appendWeights(nil, tc.ws, tc.models)
			want := make([]weightJSON, len(tc.ws))
			for i, w := range tc.ws {
				want[i] = weightJSON{Path: w.Path, Size: w.Size, Shared: w.Shared, Complete: w.Complete,
					Problem: w.Problem, ModelID: w.ModelID, Revision: w.Revision, Model: tc.models[i]}
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(want); err != nil {
				t.Fatal(err)
			}
			wantText := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
			if len(tc.ws) == 0 {
				wantText = []byte("[]")
			}
			if !bytes.Equal(got, wantText) {
				t.Fatalf("appendWeights =\n%s\nencoding/json =\n%s", got, wantText)
			}

			// What encoding/json makes of the text is what decodeWeights
			// must give, whichever path it takes.
			var back []weightJSON
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			ps, err := decodeWeights(string(got), interner{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != len(back) {
				t.Fatalf("decoded %d weights, want %d", len(ps), len(back))
			}
			for i, b := range back {
				p := ps[i]
				if (weightJSON{p.Path, p.Size, p.Shared, p.Complete, p.Problem, p.ModelID, p.Revision, p.Model}) != b {
					t.Errorf("weight %d = %+v, want %+v", i, p, b)
				}
			}
		})
	}

	// An array an admin rewrote (whitespace, other key order, escapes the
	// store never writes) still decodes, through encoding/json.
	rewritten := `[ {"model":"m","complete":true,"path":"\/a\u002fb","size_bytes":5,"shared":false} ]`
	if _, err := decodeFast(rewritten, nil, nil); err == nil {
		t.Fatal("the fast decoder accepted text it was not written for")
	}
	ps, err := decodeWeights(rewritten, nil, nil)
	want := []Presence{{Path: "/a/b", Size: 5, Complete: true, Model: "m"}}
	if err != nil || !reflect.DeepEqual(ps, want) {
		t.Errorf("decodeWeights(rewritten) = %+v, %v; want %+v", ps, err, want)
	}
	if _, err := decodeWeights(`[{"path":`, nil, nil); err == nil {
		t.Error("decodeWeights accepted a truncated array")
	}
}

// TestPresenceQueryable checks what the migration promises an admin:
// SQLite's JSON functions read the arrays, and presence_rows has one row
// per weight.
func TestPresenceQueryable(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	if _, _, err := db.PutModel(ctx, api.Model{Name: "llama", Source: "/lustre/llama"}, t0); err != nil {
		t.Fatal(err)
	}
	r := report("n1", 1,
		api.Weight{Path: "/lustre/llama", Size: 7, Shared: true, Complete: true},
		api.Weight{Path: "/tmp/odd \"name\"\x01", Size: 1, Problem: "partial"})
	if _, err := db.Ingest(ctx, []*api.Report{r, report("n2", 1)}, t0); err != nil {
		t.Fatal(err)
	}
	var holders []string
	rows, err := db.cr().QueryContext(ctx, `SELECT p.node FROM presence p, json_each(p.weights) j
		WHERE j.value->>'model' = 'llama'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		holders = append(holders, n)
	}
	rows.Close()
	if !reflect.DeepEqual(holders, []string{"n1"}) {
		t.Errorf("nodes holding llama by json_each = %v, want [n1]", holders)
	}

	type row struct {
		Node, Path            string
		Size                  int64
		Shared, Complete      bool
		Problem, ID, Rev, Mdl string
	}
	var got []row
	rows, err = db.cr().QueryContext(ctx, `SELECT node, path, size_bytes, shared, complete, problem, model_id,
		revision, coalesce(model, '') FROM presence_rows ORDER BY node, path`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var x row
		if err := rows.Scan(&x.Node, &x.Path, &x.Size, &x.Shared, &x.Complete, &x.Problem, &x.ID, &x.Rev, &x.Mdl); err != nil {
			t.Fatal(err)
		}
		got = append(got, x)
	}
	rows.Close()
	want := []row{
		{Node: "n1", Path: "/lustre/llama", Size: 7, Shared: true, Complete: true, Mdl: "llama"},
		{Node: "n1", Path: "/tmp/odd \"name\"\x01", Size: 1, Problem: "partial"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("presence_rows =\n%+v\nwant\n%+v", got, want)
	}
	if ps, err := db.NodePresence(ctx, "n2"); err != nil || len(ps) != 0 {
		t.Errorf("NodePresence of a node without weights = %+v, %v", ps, err)
	}
}

// TestRematchIsIngest checks that after any catalog change a node's stored
// models are what ingesting its report again would give, including where
// two entries could claim the same weights (a path beats a model id), and
// that a node whose weights no change concerns is left alone.
func TestRematchIsIngest(t *testing.T) {
	ctx := context.Background()
	const remote = "hf:org/repo/w.gguf"
	ws := []api.Weight{
		{Path: "/hub/models--Org--M/snapshots/abc", ModelID: "Org/M", Revision: "abc", Complete: true},
		{Path: catalog.CachePathFor("/var/cache/llmgw", remote), Complete: true},
		{Path: "/srv/x", Complete: true},
	}
	db := mustOpen(t)
	other := report("bystander", 1, api.Weight{Path: "/elsewhere", Complete: true})
	if _, err := db.Ingest(ctx, []*api.Report{report("n1", 1, ws...), other}, t0); err != nil {
		t.Fatal(err)
	}
	var before string
	db.cr().QueryRowContext(ctx, `SELECT weights FROM presence WHERE node = 'bystander'`).Scan(&before)

	steps := []struct {
		name string
		do   func() error
	}{
		{"add by id@rev", func() error {
			_, _, err := db.PutModel(ctx, api.Model{Name: "byid", Source: "Org/M@abc"}, t0)
			return err
		}},
		{"add by path over the id", func() error {
			_, _, err := db.PutModel(ctx, api.Model{Name: "bypath", Source: "/hub/models--Org--M/snapshots/abc/"}, t0)
			return err
		}},
		{"add remote", func() error { _, _, err := db.PutModel(ctx, api.Model{Name: "remote", Source: remote}, t0); return err }},
		{"add a file below a reported directory", func() error {
			_, _, err := db.PutModel(ctx, api.Model{Name: "inside", Source: "/srv/x/shard/w.gguf"}, t0)
			return err
		}},
		{"move the path entry away", func() error {
			_, _, err := db.PutModel(ctx, api.Model{Name: "bypath", Source: "/srv/x"}, t0)
			return err
		}},
		{"delete remote", func() error { return db.DeleteModel(ctx, "remote") }},
		{"move the exact entry off, the one below holds again", func() error {
			_, _, err := db.PutModel(ctx, api.Model{Name: "bypath", Source: "/srv/y"}, t0)
			return err
		}},
		{"delete the one below", func() error { return db.DeleteModel(ctx, "inside") }},
		{"delete by id", func() error { return db.DeleteModel(ctx, "byid") }},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := st.do(); err != nil {
				t.Fatal(err)
			}
			got, err := db.NodePresence(ctx, "n1")
			if err != nil {
				t.Fatal(err)
			}
			// The reference: a fresh store with this catalog, the same report.
			ref := mustOpen(t)
			models, _ := db.Models(ctx)
			for _, m := range models {
				if _, _, err := ref.PutModel(ctx, m, t0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := ref.Ingest(ctx, []*api.Report{report("n1", 1, ws...)}, t0); err != nil {
				t.Fatal(err)
			}
			want, _ := ref.NodePresence(ctx, "n1")
			if !reflect.DeepEqual(got, want) {
				t.Errorf("after rematch %+v\nafter ingest  %+v", got, want)
			}
		})
	}
	var after string
	db.cr().QueryRowContext(ctx, `SELECT weights FROM presence WHERE node = 'bystander'`).Scan(&after)
	if after != before || before == "" {
		t.Errorf("an unconcerned node's array changed:\n%s\n%s", before, after)
	}
}

// TestIngestCleansAndSorts checks that a report's paths are stored cleaned
// and in path order however the agent listed them, that an unchanged
// listing in another order is recognised as unchanged, and that the
// caller's report is left as it was.
func TestIngestCleansAndSorts(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	if _, _, err := db.PutModel(ctx, api.Model{Name: "b", Source: "/m/b"}, t0); err != nil {
		t.Fatal(err)
	}
	ws := []api.Weight{{Path: "/m/c/", Size: 3}, {Path: "/m//b", Size: 2, Complete: true}, {Path: "/m/a", Size: 1}}
	r := report("n1", 1, ws...)
	orig := slices.Clone(r.Weights)
	out, err := db.Ingest(ctx, []*api.Report{r}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Weights, orig) {
		t.Errorf("Ingest changed the caller's weights: %+v", r.Weights)
	}
	if h := out[0].Node.Holdings; len(h) != 1 || h[0].Path != "/m/b" || h[0].Model != "b" {
		t.Errorf("holdings = %+v, want /m/b as b", h)
	}
	ps, err := db.NodePresence(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range ps {
		paths = append(paths, p.Path)
	}
	if !reflect.DeepEqual(paths, []string{"/m/a", "/m/b", "/m/c"}) {
		t.Errorf("stored paths = %v", paths)
	}
	hash := db.meta["n1"].hash
	r2 := report("n1", 2, ws[2], ws[0], ws[1])
	if _, err := db.Ingest(ctx, []*api.Report{r2}, t0); err != nil {
		t.Fatal(err)
	}
	if db.meta["n1"].hash != hash {
		t.Error("the same weights in another order got another fingerprint")
	}
}
