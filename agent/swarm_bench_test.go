package agent

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSwarmPipelineLag measures how far behind the seed the other
// members of a fabric finish (issue 18: "the last node of a fabric finishes
// within seconds of the first"): three nodes, the real coordinator at its
// default report interval, 32 chunks of 256 KiB from an origin at 4 MiB/s.
// lag-ms is the last node's finish after the seed's. Each iteration is a
// new fabric (new munged daemons, coordinator and origin), set up off the
// clock.
//
//	go test ./agent/ -run '^$' -bench SwarmPipelineLag -benchtime 5x
func BenchmarkSwarmPipelineLag(b *testing.B) {
	var lag, total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		base := 100 + 3*(i%40)
		e := newFabric(b, 32, faultChunk, 4<<20, base, base+1, base+2)
		seed := e.nodes[nodeName(base)]
		b.StartTimer()
		start := time.Now()
		seed.fetch(b)
		until(b, 5*time.Second, "the seed reads", func() bool { return e.o.sent.Load() > 0 })
		e.nodes[nodeName(base+1)].fetch(b)
		e.nodes[nodeName(base+2)].fetch(b)
		seed.wait(b, 30*time.Second)
		seedDone := time.Now()
		e.nodes[nodeName(base+1)].wait(b, 30*time.Second)
		e.nodes[nodeName(base+2)].wait(b, 30*time.Second)
		lag += time.Since(seedDone)
		total += time.Since(start)
		if got := e.o.sent.Load(); got != int64(len(e.data)) {
			b.Fatalf("the origin served %d bytes of %d", got, len(e.data))
		}
	}
	b.ReportMetric(float64(lag.Milliseconds())/float64(b.N), "lag-ms")
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "total-ms")
}

func nodeName(k int) string { return fmt.Sprintf("n%d", k) }
