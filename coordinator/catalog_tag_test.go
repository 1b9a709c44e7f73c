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
	if tag() == pinned {
		t.Error("the tag did not change when the pin was forgotten")
	}
}
