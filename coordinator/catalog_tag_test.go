package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// TestReportAnswerCatalogTag: the answer to a report names the catalog as
// the coordinator serves it, so an agent reads the catalog only when it
// changed: the same tag while nothing changes, another after an entry is
// added, after a pin is taken (which raises no generation) and after it is
// forgotten.
func TestReportAnswerCatalogTag(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{ReportInterval: 10 * time.Second}, testTokens)
	seq := int64(0)
	tag := func() string {
		seq++
		ans := postReport(t, e.agent, report("n1", "ib-a", seq))
		if ans.CatalogTag == "" {
			t.Fatal("the answer names no catalog")
		}
		return ans.CatalogTag
	}
	empty := tag()
	if again := tag(); again != empty {
		t.Errorf("the tag changed from %s to %s with the catalog unchanged", empty, again)
	}
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "wanted", Source: wantedSrc}); err != nil {
		t.Fatal(err)
	}
	added := tag()
	if added == empty {
		t.Error("the tag did not change when a model was added")
	}
	if _, err := e.admin.Pin(ctx, api.PinRequest{Source: wantedSrc, SHA256: strings.Repeat("ab", 32), Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	pinned := tag()
	if pinned == added {
		t.Error("the tag did not change when the model was pinned")
	}
	if err := e.admin.Repin(ctx, "wanted"); err != nil {
		t.Fatal(err)
	}
	repinned := tag()
	if repinned == pinned {
		t.Error("the tag did not change when the pin was forgotten")
	}
	// An admin's adoption (gc --trust) raises no generation and changes
	// no entry, but the catalog's answer carries it, and a node that
	// distrusts the catalog adopts it only by reading that answer: with
	// the tag unchanged, a node not asked by the gc request itself (down
	// then) never read it, and its gc stayed held.
	if _, err := e.admin.StartGC(ctx, api.GCRequest{Trust: true}); err != nil {
		t.Fatal(err)
	}
	trusted := tag()
	if trusted == repinned {
		t.Error("the tag did not change when an admin adopted the catalog (gc --trust)")
	}
	// Removing the model records its source as dropped by an admin
	// (superseded): a new generation, and a new tag.
	if err := e.admin.DeleteModel(ctx, "wanted"); err != nil {
		t.Fatal(err)
	}
	if tag() == trusted {
		t.Error("the tag did not change when a model was removed")
	}
}

// TestCatalogTagCoversTheAnswer: the tag digests every field of the
// catalog's answer an agent keeps in its copy, so a field added to the
// answer later cannot change without the tag: each field, changed alone,
// changes it.
func TestCatalogTagCoversTheAnswer(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	base := api.Models{Models: []api.Model{{Name: "m", Source: wantedSrc}}, CatalogID: "id", Generation: 3,
		History: []string{"c3", "c2"}, Superseded: map[string]string{"old.gguf": "m"}, Trusted: "c2", TrustedAt: at}
	for name, change := range map[string]func(*api.Models){
		"models": func(m *api.Models) {
			m.Models = []api.Model{{Name: "m", Source: wantedSrc, Pinned: strings.Repeat("ab", 32)}}
		},
		"identity":   func(m *api.Models) { m.CatalogID = "other" },
		"generation": func(m *api.Models) { m.Generation++ },
		"history":    func(m *api.Models) { m.History = []string{"c9", "c2"} },
		"superseded": func(m *api.Models) { m.Superseded = map[string]string{"older.gguf": "m"} },
		"trusted":    func(m *api.Models) { m.Trusted = "c3" },
		"trusted_at": func(m *api.Models) { m.TrustedAt = at.Add(time.Second) },
	} {
		changed := base
		change(&changed)
		if catalogTag(changed) == catalogTag(base) {
			t.Errorf("the tag did not change with the answer's %s", name)
		}
	}
	if catalogTag(base) != catalogTag(base) {
		t.Error("the tag of one answer is not one tag")
	}
}
