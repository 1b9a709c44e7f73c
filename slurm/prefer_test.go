package slurm

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// composeCase is one case of testdata/compose/cases.json, the table that
// both Compose and job_submit.lua's compose are held to.
type composeCase struct {
	Name string `json:"name"`
	In   struct {
		ComposeInput
		Cluster string `json:"cluster"` // a key of the file's clusters
	} `json:"in"`
	Want Composition `json:"want"`
}

type composeCases struct {
	Clusters map[string][]FeatureNode `json:"clusters"`
	Cases    []composeCase            `json:"cases"`
}

func loadComposeCases(t *testing.T) composeCases {
	t.Helper()
	b, err := os.ReadFile("testdata/compose/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cs composeCases
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatalf("testdata/compose/cases.json: %v", err)
	}
	for _, c := range cs.Cases {
		if _, ok := cs.Clusters[c.In.Cluster]; !ok {
			t.Fatalf("case %q: no cluster %q", c.Name, c.In.Cluster)
		}
	}
	return cs
}

// input is the case's ComposeInput with its cluster filled in.
func (c composeCase) input(cs composeCases) ComposeInput {
	in := c.In.ComposeInput
	in.Cluster = cs.Clusters[c.In.Cluster]
	in.Prefix = testPrefix
	return in
}

// testPrefix is the feature prefix the shared cases are written for: the
// one llmgw uses (placement.FeaturePrefix) and job_submit.lua's PREFIX.
const testPrefix = "llmgw."

func TestCompose(t *testing.T) {
	cs := loadComposeCases(t)
	for _, c := range cs.Cases {
		t.Run(c.Name, func(t *testing.T) {
			got := Compose(c.input(cs))
			if got.Prefer != c.Want.Prefer || !slices.Equal(got.Exclude, c.Want.Exclude) ||
				got.Comment != c.Want.Comment || got.SpankModel != c.Want.SpankModel || got.Holders != c.Want.Holders {
				t.Errorf("Compose:\n got prefer=%q exclude=%v comment=%q spank=%q holders=%d\nwant prefer=%q exclude=%v comment=%q spank=%q holders=%d\nnotes: %s",
					got.Prefer, got.Exclude, got.Comment, got.SpankModel, got.Holders,
					c.Want.Prefer, c.Want.Exclude, c.Want.Comment, c.Want.SpankModel, c.Want.Holders,
					strings.Join(got.Notes, "; "))
			}
			if len(got.Prefer) > MaxExpression || len(got.Comment) > MaxExpression {
				t.Errorf("over Slurm's %d-character cap: prefer %d, comment %d", MaxExpression, len(got.Prefer), len(got.Comment))
			}
			// Whatever was or was not added, the user is told why.
			if len(got.Notes) == 0 && got.Prefer == "" {
				t.Errorf("no preference and no note saying why")
			}
		})
	}
}
