package full

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/prolog"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
	"github.com/llmgw/llmgw/weights/scan"
)

// newProlog is a Prolog for a node with no agent (its socket does not
// exist) and a catalog copy holding models. scontrol is a script that
// records its arguments.
func newProlog(t *testing.T, models ...catalog.Model) (*Prolog, *bytes.Buffer, string) {
	dir := t.TempDir()
	cfg := nodeconf.Agent{CacheDir: dir + "/cache", StateDir: dir + "/state", RunDir: dir + "/run", Socket: dir + "/run/agent.sock",
		FetchDeadline: 5 * time.Second}.WithDefaults()
	if err := catalog.WriteCopy(cfg.CatalogCopyPath(), catalog.Copy{Coordinator: "http://coord", Models: models}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	calls := filepath.Join(dir, "scontrol.args")
	os.WriteFile(filepath.Join(bin, "scontrol"), []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" >>"+calls+"\n"), 0o755)
	var log bytes.Buffer
	return &Prolog{
		Config:  cfg,
		Agent:   &api.LocalClient{Socket: cfg.Socket},
		Fetcher: &fetch.Fetcher{CacheDir: cfg.CacheDir, LockDir: cfg.LockDir(), RetryWait: time.Millisecond, Retries: 1},
		Slurm:   &slurm.Runner{Dir: bin},
		Log:     &log,
	}, &log, calls
}

func serve(t *testing.T, body []byte, hits *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !strings.HasSuffix(r.URL.Path, ".gguf") || strings.Contains(r.URL.Path, "gone") {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "w.gguf", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func TestPrologFetchesWithoutAgent(t *testing.T) {
	body := bytes.Repeat([]byte("weights"), 1000)
	sum := sha256.Sum256(body)
	var hits atomic.Int64
	o := serve(t, body, &hits)
	m := catalog.Model{Name: "m", Source: o.URL + "/w.gguf", Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
	p, log, calls := newProlog(t, m)
	p.Run(context.Background(), prolog.Job{ID: "1", Node: "n1", Model: "m"}, nil)

	rec, err := catalog.ReadJobRecord(p.Config.RunDir, "1")
	want := catalog.CachePathFor(p.Config.CacheDir, m.Source)
	if err != nil || rec.Path != want || rec.Error != "" || rec.Source != m.Source {
		t.Fatalf("record = %+v, %v; want path %s; log:\n%s", rec, err, want, log)
	}
	if !strings.Contains(log.String(), "no agent") {
		t.Errorf("log does not say the agent was absent:\n%s", log)
	}
	if _, err := os.Stat(calls); err == nil {
		t.Errorf("scontrol was called on success")
	}
	// Now the fast path settles the next job without any request.
	if err := prolog.Fast(p.Config, prolog.Job{ID: "2", Model: "m"}, time.Now()); err != nil || hits.Load() != 1 {
		t.Errorf("fast path after the fetch: %v, origin hits %d", err, hits.Load())
	}
}

func TestPrologRecordsFailures(t *testing.T) {
	var hits atomic.Int64
	o := serve(t, []byte("x"), &hits)
	p, log, calls := newProlog(t, catalog.Model{Name: "gone", Source: o.URL + "/gone.gguf"})

	for _, tc := range []struct {
		job    prolog.Job
		jobErr error
		want   []string
	}{
		{prolog.Job{ID: "10", Node: "n1", Model: "gone"}, nil, []string{"weights for model gone (source " + o.URL + "/gone.gguf) could not be had on n1", "404"}},
		{prolog.Job{ID: "11", Node: "n1", Model: "nosuch"}, nil, []string{"model nosuch is not in the node's catalog copy"}},
		{prolog.Job{ID: "12", Node: "n1", Model: "a|b"}, errors.New("model name \"a|b\" may contain only"), []string{"bad job description"}},
	} {
		p.Run(context.Background(), tc.job, tc.jobErr)
		rec, err := catalog.ReadJobRecord(p.Config.RunDir, tc.job.ID)
		if err != nil || rec.Path != "" {
			t.Fatalf("job %s: record %+v, %v", tc.job.ID, rec, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(rec.Error, w) {
				t.Errorf("job %s: record error %q lacks %q", tc.job.ID, rec.Error, w)
			}
		}
	}
	args, _ := os.ReadFile(calls)
	if !strings.Contains(string(args), "update\nJobId=10\nAdminComment=llmgw: weights for model gone") {
		t.Errorf("scontrol calls:\n%s\nwant an AdminComment update for job 10", args)
	}
	if !strings.Contains(log.String(), "job 11") {
		t.Errorf("log:\n%s", log)
	}
}

func TestPrologCoordinator(t *testing.T) {
	body := []byte("the weights")
	var hits atomic.Int64
	o := serve(t, body, &hits)
	copied := catalog.Model{Name: "m", Source: o.URL + "/old.gguf"}
	p, log, _ := newProlog(t, copied)

	// A coordinator that does not answer: the copy resolves the model.
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	p.Coordinator = &api.Client{BaseURL: down.URL}
	p.Run(context.Background(), prolog.Job{ID: "1", Model: "m"}, nil)
	if rec, _ := catalog.ReadJobRecord(p.Config.RunDir, "1"); rec.Source != copied.Source || rec.Path == "" {
		t.Errorf("coordinator down: record %+v; want the copy's source fetched; log:\n%s", rec, log)
	}

	// A coordinator that answers is believed over the copy.
	coord := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"models":[{"name":"m","source":"` + o.URL + `/new.gguf"}]}`))
	}))
	defer coord.Close()
	p.Coordinator = &api.Client{BaseURL: coord.URL}
	p.Run(context.Background(), prolog.Job{ID: "2", Model: "m"}, nil)
	if rec, _ := catalog.ReadJobRecord(p.Config.RunDir, "2"); rec.Source != o.URL+"/new.gguf" || rec.Path == "" {
		t.Errorf("coordinator up: record %+v; want its source", rec)
	}
	p.Run(context.Background(), prolog.Job{ID: "3", Model: "other"}, nil)
	if rec, _ := catalog.ReadJobRecord(p.Config.RunDir, "3"); !strings.Contains(rec.Error, "not in the catalog at "+coord.URL) {
		t.Errorf("unknown model with the coordinator up: record %+v", rec)
	}
}

func TestPrologDeadline(t *testing.T) {
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer stall.Close()
	p, _, _ := newProlog(t, catalog.Model{Name: "m", Source: stall.URL + "/slow.gguf"})
	p.Config.FetchDeadline = 300 * time.Millisecond
	start := time.Now()
	p.Run(context.Background(), prolog.Job{ID: "1", Model: "m"}, nil)
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Run took %s with a deadline of 300ms", el)
	}
	rec, _ := catalog.ReadJobRecord(p.Config.RunDir, "1")
	if !strings.Contains(rec.Error, "fetch deadline of 300ms") {
		t.Errorf("record after the deadline: %+v", rec)
	}
}

func TestEpilogGate(t *testing.T) {
	run := t.TempDir()
	cfg := nodeconf.Agent{RunDir: run, GCInterval: time.Hour, GCTimeout: 200 * time.Millisecond}.WithDefaults()
	catalog.WriteJobRecord(run, catalog.JobRecord{Job: "5", Model: "m", Path: "/x"})
	var runs atomic.Int64
	var log bytes.Buffer
	e := &Epilog{Config: cfg, Log: &log, GC: func(ctx context.Context, _ nodeconf.Agent) error {
		runs.Add(1)
		<-ctx.Done() // a gc slower than its bound
		return ctx.Err()
	}}
	start := time.Now()
	e.Run(context.Background(), "5")
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Epilog took %s with a gc bound of 200ms", el)
	}
	if _, err := catalog.ReadJobRecord(run, "5"); !os.IsNotExist(err) {
		t.Errorf("record after the Epilog: %v", err)
	}
	e.Run(context.Background(), "6")
	if runs.Load() != 1 {
		t.Errorf("gc ran %d times in two Epilogs within the interval, want 1", runs.Load())
	}
	if !strings.Contains(log.String(), "gc_timeout") {
		t.Errorf("log does not say gc was cut short:\n%s", log.String())
	}
	e.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	e.Run(context.Background(), "7")
	if runs.Load() != 2 {
		t.Errorf("gc did not run again after the interval (%d runs)", runs.Load())
	}
}

// TestCommentTag: the hooks (prolog, which may not link slurm) read the
// comment tag that llmgw sbatch and job_submit.lua write (slurm); one
// spelling each, held equal here, where both are linked.
func TestCommentTag(t *testing.T) {
	if prolog.CommentTag != slurm.CommentTag {
		t.Errorf("prolog.CommentTag %q, slurm.CommentTag %q", prolog.CommentTag, slurm.CommentTag)
	}
}

// TestPrologFetchesASignedURLFromThePrivateCopy: with neither coordinator
// nor agent answering, the Prolog (root) resolves the model from the
// node's private catalog copy, where the signed URL is whole, and fetches
// it; the world-readable copy and the job record, which the job's user
// reads, hold no signature, and the fast path still finds the file.
func TestPrologFetchesASignedURLFromThePrivateCopy(t *testing.T) {
	body := bytes.Repeat([]byte("weights"), 1000)
	sum := sha256.Sum256(body)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sig") != "s3cret" {
			http.Error(w, "signature does not match", http.StatusForbidden)
			return
		}
		http.ServeContent(w, r, "w.gguf", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(o.Close)
	m := catalog.Model{Name: "m", Source: o.URL + "/w.gguf?sig=s3cret", Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
	p, log, _ := newProlog(t)
	cp := catalog.Copy{Coordinator: "http://coord", Models: []catalog.Model{m}}
	if err := catalog.WritePrivateCopy(p.Config.CatalogCopyPath(), cp); err != nil {
		t.Fatal(err)
	}
	if err := catalog.WriteCopy(p.Config.CatalogCopyPath(), cp); err != nil {
		t.Fatal(err)
	}
	p.Run(context.Background(), prolog.Job{ID: "1", Node: "n1", Model: "m"}, nil)

	rec, err := catalog.ReadJobRecord(p.Config.RunDir, "1")
	if err != nil || rec.Error != "" || rec.Path != catalog.CachePathFor(p.Config.CacheDir, m.Source) {
		t.Fatalf("record = %+v, %v; log:\n%s", rec, err, log)
	}
	for _, f := range []string{p.Config.CatalogCopyPath(), filepath.Join(catalog.JobsDir(p.Config.RunDir), "1.json")} {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), "s3cret") || len(b) == 0 {
			t.Errorf("%s, which the job's user reads, holds the signature (or nothing):\n%s", f, b)
		}
	}
	if err := prolog.Fast(p.Config, prolog.Job{ID: "2", Model: "m"}, time.Now()); err != nil {
		t.Errorf("fast path from the redacted copy: %v", err)
	}
}

// TestFailedSignedFetchKeepsTheSignatureOutOfTheRecord: a fetch the origin
// refuses fails with an error quoting the URL; the job record, which the
// job's user reads, says why without the signature.
func TestFailedSignedFetchKeepsTheSignatureOutOfTheRecord(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "signature expired", http.StatusForbidden)
	}))
	t.Cleanup(o.Close)
	m := catalog.Model{Name: "m", Source: o.URL + "/w.gguf?sig=s3cret&exp=1"}
	p, log, _ := newProlog(t)
	cp := catalog.Copy{Coordinator: "http://coord", Models: []catalog.Model{m}}
	catalog.WritePrivateCopy(p.Config.CatalogCopyPath(), cp)
	catalog.WriteCopy(p.Config.CatalogCopyPath(), cp)
	p.Run(context.Background(), prolog.Job{ID: "1", Node: "n1", Model: "m"}, nil)
	rec, err := catalog.ReadJobRecord(p.Config.RunDir, "1")
	if err != nil || rec.Error == "" {
		t.Fatalf("record = %+v, %v; want a failure; log:\n%s", rec, err, log)
	}
	if b, _ := os.ReadFile(filepath.Join(catalog.JobsDir(p.Config.RunDir), "1.json")); strings.Contains(string(b), "s3cret") {
		t.Errorf("the job record holds the signature:\n%s", b)
	}
}

// The hooks bound a touch of the weights as the scanner bounds a directory
// (nodeconf spells the scanner's default again, to keep the scanner out of
// the hook binary).
func TestFSTimeoutDefault(t *testing.T) {
	if nodeconf.DefaultDirTimeout != scan.DefaultDirTimeout {
		t.Errorf("nodeconf.DefaultDirTimeout = %s, scan.DefaultDirTimeout = %s: keep them equal", nodeconf.DefaultDirTimeout, scan.DefaultDirTimeout)
	}
}

// TestEpilogKeepsWhatPrologFetched: with the agent down, the Prolog
// resolves at the coordinator a model the node's catalog copy lacks and
// fetches it in this process; the Epilog's gc, reading the node's copy,
// must not take it away again.
func TestEpilogKeepsWhatPrologFetched(t *testing.T) {
	body := []byte("just fetched")
	var hits atomic.Int64
	o := serve(t, body, &hits)
	// The copy knows another model only: it is not empty, so gc trusts it.
	p, log, _ := newProlog(t, catalog.Model{Name: "old", Source: o.URL + "/old.gguf"})
	coord := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"models":[{"name":"old","source":"` + o.URL + `/old.gguf"},{"name":"new","source":"` + o.URL + `/new.gguf"}]}`))
	}))
	defer coord.Close()
	p.Coordinator = &api.Client{BaseURL: coord.URL}
	p.Run(context.Background(), prolog.Job{ID: "1", Node: "n1", Model: "new"}, nil)
	rec, err := catalog.ReadJobRecord(p.Config.RunDir, "1")
	if err != nil || rec.Path == "" {
		t.Fatalf("record %+v, %v; log:\n%s", rec, err, log)
	}
	(&Epilog{Config: p.Config, GC: NodeGC(log), Log: log}).Run(context.Background(), "1")
	if _, err := os.Stat(rec.Path); err != nil {
		t.Fatalf("the Epilog's gc removed what the Prolog just fetched: %v; log:\n%s", err, log)
	}
	cp, err := catalog.ReadCopy(p.Config.CatalogCopyPath())
	if _, ok := cp.Lookup("new"); err != nil || !ok {
		t.Errorf("the catalog copy after resolving at the coordinator: %+v, %v; want it to hold model new", cp, err)
	}
}

// TestEpilogDistrustsShrunkCatalog: a coordinator on another database (a
// fresh install, a wrong URL), or its own database restored from an older
// backup, answers with a catalog that lacks a model this node holds. The
// Prolog believes it for its own model, but the Epilog's gc must not empty
// the cache by it.
func TestEpilogDistrustsShrunkCatalog(t *testing.T) {
	var hits atomic.Int64
	o := serve(t, []byte("x"), &hits)
	a, b := o.URL+"/a.gguf", o.URL+"/b.gguf"
	for _, tc := range []struct{ name, id, gen, want string }{
		{"another database", "bbbb", "9", "has identity bbbb, not aaaa"},
		{"a restored backup", "aaaa", "4", "generation 4, older than generation 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, log, _ := newProlog(t)
			// The copy this node holds: catalog aaaa at generation 5, which
			// it trusts, wanting both models.
			os.WriteFile(p.Config.CatalogCopyPath(), []byte(`{"coordinator":"http://c","models":[{"name":"a","source":"`+a+
				`"},{"name":"b","source":"`+b+`"}],"catalog_id":"aaaa","generation":5,"trusted_catalog_id":"aaaa","trusted_generation":5}`), 0o644)
			long := time.Now().Add(-24 * time.Hour)
			os.MkdirAll(p.Config.CacheDir, 0o755)
			for _, src := range []string{a, b} {
				path := catalog.CachePathFor(p.Config.CacheDir, src)
				// b is the smaller file: it is not gc_max_share that saves it.
				size := 1000
				if src == b {
					size = 10
				}
				os.WriteFile(path, make([]byte, size), 0o644)
				os.Chtimes(path, long, long)
			}
			coord := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"models":[{"name":"a","source":"` + a + `"}],"catalog_id":"` + tc.id + `","generation":` + tc.gen + `}`))
			}))
			defer coord.Close()
			p.Coordinator = &api.Client{BaseURL: coord.URL}
			p.Run(context.Background(), prolog.Job{ID: "1", Node: "n1", Model: "a"}, nil)
			if rec, err := catalog.ReadJobRecord(p.Config.RunDir, "1"); err != nil || rec.Path == "" {
				t.Fatalf("record %+v, %v; log:\n%s", rec, err, log)
			}
			(&Epilog{Config: p.Config, GC: NodeGC(log), Log: log}).Run(context.Background(), "1")
			if _, err := os.Stat(catalog.CachePathFor(p.Config.CacheDir, b)); err != nil {
				t.Fatalf("the Epilog's gc collected against a catalog that shrank: %v; log:\n%s", err, log)
			}
			if !strings.Contains(log.String(), tc.want) || !strings.Contains(log.String(), "--force") {
				t.Errorf("the Epilog's log does not say why gc held (%q) and how to override it:\n%s", tc.want, log)
			}
		})
	}
}
