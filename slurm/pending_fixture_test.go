package slurm

import (
	"os"
	"path/filepath"
	"testing"
)

// TestParsePendingPlansCaptured reads what each release's squeue printed
// for PendingPlans' format on the dev cluster (testdata/*/squeue-pending*):
// before backfill's first cycle no job has a plan; after it the jobs behind
// the running one have their nodes and start, and every model is found,
// through a '|' and a newline in their comments.
func TestParsePendingPlansCaptured(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/*/squeue-pending.txt")
	if len(dirs) == 0 {
		t.Fatal("no captured squeue-pending.txt under testdata")
	}
	for _, path := range dirs {
		rel := filepath.Base(filepath.Dir(path))
		t.Run(rel, func(t *testing.T) {
			for name, planned := range map[string]bool{"squeue-pending.txt": true, "squeue-pending-unplanned.txt": false} {
				b, err := os.ReadFile(filepath.Join("testdata", rel, name))
				if err != nil {
					t.Fatal(err)
				}
				jobs, err := ParsePendingPlans(b)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				models := map[string]string{}
				for _, j := range jobs {
					if j.Model != "" {
						models[j.Model] = j.ID
					}
					if planned && j.Model != "" && (len(j.Nodes) == 0 || j.Start.IsZero() || j.NumNodes < 1) {
						t.Errorf("%s: job %s has no plan: %+v", name, j.ID, j)
					}
					if !planned && (len(j.Nodes) != 0 || !j.Start.IsZero()) {
						t.Errorf("%s: job %s has a plan before backfill ran: %+v", name, j.ID, j)
					}
				}
				for _, m := range []string{"m1", "m2", "m3"} {
					if models[m] == "" {
						t.Errorf("%s: no job for model %s; jobs %+v", name, m, jobs)
					}
				}
				if planned {
					for _, j := range jobs {
						if j.Model == "m1" && len(j.Nodes) != 2 {
							t.Errorf("%s: m1's 2-node job planned on %v", name, j.Nodes)
						}
						if j.Model == "m3" && !j.Warm {
							t.Errorf("%s: m3's job asked to wait: %+v", name, j)
						}
					}
				}
			}
		})
	}
}
