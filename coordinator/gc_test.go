package coordinator

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

const (
	wantedSrc   = "https://origin.example/m/wanted.gguf"
	unwantedSrc = "https://origin.example/m/removed.gguf"
)

// postReport sends r and returns the coordinator's answer.
func postReport(t *testing.T, c *api.Client, r *api.Report) api.ReportAnswer {
	t.Helper()
	var ans api.ReportAnswer
	if err := c.Do(context.Background(), http.MethodPost, "/v1/reports", r, &ans); err != nil {
		t.Fatalf("report from %s: %v", r.Node, err)
	}
	return ans
}

// gcReport is a node holding, in its cache dir, a wanted and an unwanted
// cache file and an operator's file, and elsewhere a file with a cache name.
func gcReport(node string, seq int64) *api.Report {
	cache := "/var/cache/llmgw"
	return report(node, "ib-a", seq,
		api.Weight{Path: catalog.CachePathFor(cache, wantedSrc), Size: 10, Complete: true},
		api.Weight{Path: catalog.CachePathFor(cache, unwantedSrc), Size: 20, Complete: true},
		api.Weight{Path: cache + "/operator.gguf", Size: 20, Complete: true},
		api.Weight{Path: catalog.CachePathFor("/models", unwantedSrc), Size: 20, Complete: true},
	)
}

func TestGCThroughReports(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ReportInterval: 10 * time.Second}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "wanted", Source: wantedSrc}); err != nil {
		t.Fatal(err)
	}
	postReport(t, e.agent, gcReport("n1", 1))
	postReport(t, e.agent, gcReport("n2", 1))

	if _, err := e.agent.StartGC(ctx, api.GCRequest{Collect: true}); err == nil {
		t.Fatal("the agent token started a gc; it needs the admin token")
	}
	if _, err := e.admin.StartGC(ctx, api.GCRequest{Node: "n9"}); err == nil {
		t.Error("a gc for a node that never reported was accepted")
	} else if code, _ := apiCode(err); code != 404 {
		t.Errorf("gc for an unknown node: %v, want 404", err)
	}
	if _, err := e.admin.StartGC(ctx, api.GCRequest{Node: "../n1"}); err == nil {
		t.Error("a gc for an invalid node name was accepted")
	}
	st, err := e.admin.StartGC(ctx, api.GCRequest{Collect: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 2 || !st.Deadline.Equal(t0.Add(20*time.Second)) || !st.Collect {
		t.Fatalf("StartGC = %+v; want n1 and n2, deadline two intervals on", st)
	}

	ans := postReport(t, e.agent, gcReport("n1", 2))
	if ans.GC == nil || ans.GC.ID != st.ID || !ans.GC.Collect {
		t.Fatalf("answer to n1's report = %+v, want the gc request", ans)
	}
	want := []string{catalog.CacheName(unwantedSrc)}
	if !slices.Equal(ans.GC.Remove, want) {
		t.Errorf("asked n1 to remove %q, want %q (only unwanted cache names in its cache dir)", ans.GC.Remove, want)
	}
	if again := postReport(t, e.agent, gcReport("n1", 3)); again.GC != nil {
		t.Errorf("n1 was handed the request twice: %+v", again.GC)
	}

	answer := api.GCAnswer{Node: "n1", CacheDir: "/var/cache/llmgw", Collect: true, Freed: 20, Files: []api.GCFile{
		{Name: want[0], Path: "/var/cache/llmgw/" + want[0], Asked: true, Action: "removed", Reason: "no catalog entry wants it", Size: 20},
	}}
	if err := e.admin.AnswerGC(ctx, st.ID, answer); err != nil {
		t.Fatal(err)
	}
	if err := e.agent.AnswerGC(ctx, st.ID, answer); err == nil {
		t.Error("a second answer from n1 was accepted")
	} else if code, _ := apiCode(err); code != 409 {
		t.Errorf("second answer: %v, want 409", err)
	}
	bad := answer
	bad.Node = "n3"
	if err := e.agent.AnswerGC(ctx, st.ID, bad); err == nil {
		t.Error("an answer from a node not asked was accepted")
	}
	bad = answer
	bad.Node = "n2"
	bad.Files = []api.GCFile{{Name: "x", Action: "deleted"}}
	if err := e.agent.AnswerGC(ctx, st.ID, bad); err == nil {
		t.Error("an answer with an unknown action was accepted")
	} else if code, _ := apiCode(err); code != 400 {
		t.Errorf("bad action: %v, want 400", err)
	}
	if err := e.anon.AnswerGC(ctx, st.ID, answer); err == nil {
		t.Error("an answer without a token was accepted")
	}

	got, err := e.anon.GC(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	n1, n2 := got.Nodes[0], got.Nodes[1]
	if n1.Node != "n1" || n1.Answer == nil || n1.Answer.Freed != 20 || len(n1.Answer.Files) != 1 || !slices.Equal(n1.Asked, want) || n1.Handed.IsZero() {
		t.Errorf("n1 in GET = %+v (answer %+v)", n1, n1.Answer)
	}
	if n2.Node != "n2" || n2.Answer != nil || !n2.Handed.IsZero() {
		t.Errorf("n2 in GET = %+v, want neither handed nor answered", n2)
	}
	if _, err := e.anon.GC(ctx, "../../etc"); err == nil {
		t.Error("GET of a malformed id succeeded")
	}

	// Past the deadline n2 is not handed it: it was reported as silent.
	e.clock.set(t0.Add(21 * time.Second))
	if ans := postReport(t, e.agent, gcReport("n2", 2)); ans.GC != nil {
		t.Errorf("n2 was handed an expired request: %+v", ans.GC)
	}

	// One node only. (On the real clock from here: New loads pending
	// requests by it.)
	e.clock.set(time.Now())
	one, err := e.admin.StartGC(ctx, api.GCRequest{Node: "n2"})
	if err != nil || len(one.Nodes) != 1 || one.Nodes[0].Node != "n2" {
		t.Fatalf("StartGC(n2) = %+v, %v", one, err)
	}
	if ans := postReport(t, e.agent, gcReport("n1", 4)); ans.GC != nil {
		t.Errorf("n1 was handed a request for n2: %+v", ans.GC)
	}
	// A restarted coordinator still hands out what it had not.
	e.srv.Close()
	srv2, err := New(ctx, Config{ReportInterval: 10 * time.Second}, testTokens, e.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	srv2.now = e.clock.now
	if pg := srv2.gc.take("n2", e.clock.now()); pg == nil || pg.id != one.ID || pg.collect {
		t.Errorf("after a restart, pending for n2 = %+v, want %s (list only)", pg, one.ID)
	}
}

// TestGCRequestIDChecked: both /v1/gc/{id} routes refuse an id this
// coordinator could not have given out before any lookup.
func TestGCRequestIDChecked(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	var ae *api.Error
	if _, err := e.admin.GC(ctx, "NOT-AN-ID"); !errors.As(err, &ae) || ae.Code != api.CodeInvalid || !strings.Contains(ae.Message, "is not one this coordinator gives out") {
		t.Errorf("GET /v1/gc/NOT-AN-ID = %v; want invalid", err)
	}
	if err := e.agent.AnswerGC(ctx, "NOT-AN-ID", api.GCAnswer{Node: "n1"}); !errors.As(err, &ae) || ae.Code != api.CodeInvalid || !strings.Contains(ae.Message, "is not one this coordinator gives out") {
		t.Errorf("POST /v1/gc/NOT-AN-ID/answers = %v; want invalid", err)
	}
	if _, err := e.admin.GC(ctx, "0123abcd"); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Errorf("GET /v1/gc/0123abcd = %v; want not found (a well-formed id nobody asked for)", err)
	}
}
