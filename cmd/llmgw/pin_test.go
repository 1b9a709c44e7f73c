package main

import (
	"context"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
)

// models list tells a declared digest from a pinned one, and models repin
// (admin) forgets the pin.
func TestModelsListShowsPinnedAndRepinForgets(t *testing.T) {
	url, nodeTok, adminTok := testCoordinator(t)
	admin := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_TOKEN_FILE": adminTok}
	agent := map[string]string{"LLMGW_COORDINATOR": url, "LLMGW_TOKEN_FILE": nodeTok("n1")}
	anon := map[string]string{"LLMGW_COORDINATOR": url}
	declared, pinned := strings.Repeat("d", 64), strings.Repeat("e", 64)
	for _, args := range [][]string{
		{"models", "add", "decl", "https://origin.example/decl.gguf", "--sha256", declared},
		{"models", "add", "pinme", "https://origin.example/pinme.gguf"},
	} {
		if code, _, errs := llmgwRun(t, admin, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
	}
	tok, err := api.ReadToken(nodeTok("n1"))
	if err != nil {
		t.Fatal(err)
	}
	c := &api.Client{BaseURL: url, Token: tok}
	if _, err := c.Pin(context.Background(), api.PinRequest{Source: "https://origin.example/pinme.gguf", SHA256: pinned, ETag: `ETag: "v7"`, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	row := func(out, name string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == name {
				return strings.Join(f, " ")
			}
		}
		return ""
	}
	code, out, _ := llmgwRun(t, anon, "models", "list")
	if code != 0 || !strings.Contains(row(out, "decl"), declared[:12]+"… declared") || !strings.Contains(row(out, "pinme"), pinned[:12]+`… pinned (ETag: "v7")`) {
		t.Fatalf("models list: exit %d:\n%s", code, out)
	}
	if code, _, errs := llmgwRun(t, agent, "models", "repin", "pinme"); code == 0 {
		t.Errorf("repin with a node's token: exit 0, %s; want it refused (admin only)", errs)
	}
	// What is forgotten is said: the digest and how the origin served it.
	if code, out, errs := llmgwRun(t, admin, "models", "repin", "pinme"); code != 0 ||
		!strings.Contains(out, "pin forgotten (was sha256 "+pinned+`, served as ETag: "v7")`) {
		t.Fatalf("models repin: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := llmgwRun(t, admin, "models", "repin", "nosuch"); code == 0 || !strings.Contains(errs, "nosuch") {
		t.Errorf("repin of no model: exit %d, %q", code, errs)
	}
	code, out, _ = llmgwRun(t, anon, "models", "list")
	if r := row(out, "pinme"); code != 0 || !strings.Contains(r, "- unpinned") {
		t.Errorf("models list after repin: pinme row %q", r)
	}
}
