package store

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// BenchmarkIngest measures the store alone: 10,000 nodes' first reports of
// 50 weights each, in batches of 64, then the same again (unchanged
// weights). The figures are reports per second.
func BenchmarkIngest(b *testing.B) {
	ctx := context.Background()
	const nodes, perNode, batch = 10000, 50, 64
	for b.Loop() {
		db := mustOpen(b)
		var models []api.Model
		for i := range 200 {
			models = append(models, api.Model{Name: fmt.Sprintf("m%d", i), Source: fmt.Sprintf("/lustre/m%d", i)})
		}
		for _, m := range models {
			if _, _, err := db.PutModel(ctx, m, t0); err != nil {
				b.Fatal(err)
			}
		}
		reports := make([]*api.Report, nodes)
		for n := range nodes {
			r := report(fmt.Sprintf("gpu%05d", n), 1)
			for k := range perNode {
				r.Weights = append(r.Weights, api.Weight{Path: fmt.Sprintf("/lustre/m%d", (n+k*4)%200), Size: 1e9, Complete: true, Shared: true})
			}
			reports[n] = r
		}
		for round := int64(1); round <= 2; round++ {
			start, cpu0 := time.Now(), cpuTime()
			for i := 0; i < nodes; i += batch {
				for _, r := range reports[i:min(i+batch, nodes)] {
					r.Seq = round
				}
				if _, err := db.Ingest(ctx, reports[i:min(i+batch, nodes)], t0); err != nil {
					b.Fatal(err)
				}
			}
			rate := float64(nodes) / time.Since(start).Seconds()
			b.ReportMetric(rate, fmt.Sprintf("round%d-reports/s", round))
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/nodes, fmt.Sprintf("round%d-cpu-µs/report", round))

		}
	}
}

// BenchmarkCatalogChange measures what a catalog change costs the store
// over 10,000 nodes × 50 weights (500,000): adding an entry no node holds
// (the prefilter finds no candidate), moving an entry that a quarter of
// the nodes hold (their arrays are decoded, rematched and rewritten), and
// Nodes, which the coordinator calls to reload its view after each.
func BenchmarkCatalogChange(b *testing.B) {
	ctx := context.Background()
	const nodes, perNode, batch = 10000, 50, 64
	for b.Loop() {
		db := mustOpen(b)
		for i := range 200 {
			if _, _, err := db.PutModel(ctx, api.Model{Name: fmt.Sprintf("m%d", i), Source: fmt.Sprintf("/lustre/m%d", i)}, t0); err != nil {
				b.Fatal(err)
			}
		}
		var reports []*api.Report
		for n := range nodes {
			r := report(fmt.Sprintf("gpu%05d", n), 1)
			for k := range perNode {
				r.Weights = append(r.Weights, api.Weight{Path: fmt.Sprintf("/lustre/m%d", (n+k*4)%200), Size: 1e9, Complete: true, Shared: true})
			}
			reports = append(reports, r)
		}
		for i := 0; i < nodes; i += batch {
			if _, err := db.Ingest(ctx, reports[i:min(i+batch, nodes)], t0); err != nil {
				b.Fatal(err)
			}
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		start := time.Now()
		if _, _, err := db.PutModel(ctx, api.Model{Name: "late", Source: "/lustre/late"}, t0); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(ms(time.Since(start)), "add-unheld-ms")
		start = time.Now()
		if _, _, err := db.PutModel(ctx, api.Model{Name: "m1", Source: "/lustre/moved"}, t0); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(ms(time.Since(start)), "move-held-ms")
		start = time.Now()
		all, err := db.Nodes(ctx)
		if err != nil || len(all) != nodes {
			b.Fatalf("Nodes: %d nodes, %v", len(all), err)
		}
		b.ReportMetric(ms(time.Since(start)), "nodes-ms")
	}
}

// cpuTime is the CPU time this process has used: on a shared machine the
// wall-clock rate depends on what else runs, the CPU cost per report does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
