package coordinator

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/table"
)

// TestControlCharactersInAReport posts what a hostile agent would: an ESC
// sequence that clears and recolours the screen, and a newline followed by
// a fake status row. Neither may reach an operator's terminal: free text is
// stripped at ingest, and a path (kept as sent, since it names a file) is
// escaped when printed.
func TestControlCharactersInAReport(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "m", Source: "/m/a\x1b[8m"}); err != nil {
		t.Fatal(err)
	}
	const fakeRow = "\nn99  ib-a  ok  local  /m/a  500 GB  -  0s ago"
	rep := report("n1", "ib-a", 1,
		api.Weight{Path: "/m/a\x1b[8m", Size: 5, Complete: false, Problem: "shard missing\x1b[2J\x1b[31m" + fakeRow})
	rep.Errors = []string{"scan failed\x1b]0;pwned\x07" + fakeRow, "c1 \u009b31m"}
	rep.AgentVersion = "1.0\x1b[1A"
	if _, err := e.agent.PostReport(ctx, rep); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(e.url + "/v1/status/m")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The JSON encoder would write ESC as \u001b; the stored text has none.
	for _, bad := range []string{`\u001b`, `\u009b`, `\n`, `\u0007`} {
		if strings.Contains(strings.ReplaceAll(string(raw), `/m/a\u001b[8m`, ""), bad) {
			t.Errorf("status answer carries %s from the report's free text: %s", bad, raw)
		}
	}

	st, err := e.anon.ModelStatus(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := table.WriteModelNodes(&out, st); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if strings.ContainsAny(text, "\x1b\x07\u009b") {
		t.Errorf("the table holds control characters:\n%q", text)
	}
	if strings.Contains(text, "\nn99") {
		t.Errorf("the report drew a row of its own:\n%s", text)
	}
	if !strings.Contains(text, `/m/a\x1b[8m`) {
		t.Errorf("the path is not shown escaped:\n%s", text)
	}
}
