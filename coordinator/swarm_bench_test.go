package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// benchSwarms is the registry's size in BenchmarkSwarmReport: 250 nodes,
// each a member of swarmsPerNode (16) swarms of files of its own, about the
// registry's limit (maxSwarms, 4,096). Issue 24 measured 1.38 ms a report
// with an empty registry and 4.58 ms at 4,000 swarms: every report walked
// every swarm (expiry and the quota count) under the registry's one lock.
const benchSwarms = 4000

// BenchmarkSwarmReport is the cost of one member's swarm report, through
// the real handler (decode, checks, plan, encode; no network), with
// benchSwarms swarms in the registry, and with only the member's own: a
// report's cost must not grow with swarms it is not in.
//
//	go test ./coordinator -run '^$' -bench SwarmReport -benchtime 2000x
func BenchmarkSwarmReport(b *testing.B) {
	for _, swarms := range []int{1, benchSwarms} {
		b.Run(fmt.Sprintf("swarms=%d", swarms), func(b *testing.B) {
			e := newEnv(b, Config{ReportInterval: 30 * time.Second, SwarmMinChunk: 1 << 20}, testTokens)
			ctx := context.Background()
			admin := e.client(testTokens.Admin)
			nodes := (swarms + swarmsPerNode - 1) / swarmsPerNode
			sum := func(i int) string { return fmt.Sprintf("%064x", i+1) }
			src := func(i int) string { return fmt.Sprintf("https://origin.example/m/file-%05d.gguf", i) }
			const size = 64 << 20
			files := make([]api.File, 0, 256)
			flush := func(name string) {
				if len(files) == 1 {
					// A set needs two files: pad it with one no swarm asks for.
					files = append(files, api.File{Source: src(1 << 20), Size: size, SHA256: sum(1 << 20)})
				}
				if _, err := admin.PutModel(ctx, api.Model{Name: name, Source: files[0].Source, Files: files}); err != nil {
					b.Fatal(err)
				}
				files = files[:0]
			}
			for i := range swarms {
				files = append(files, api.File{Source: src(i), Size: size, SHA256: sum(i)})
				if len(files) == cap(files) || i == swarms-1 {
					flush(fmt.Sprintf("set-%03d", i/cap(files)))
				}
			}
			for n := range nodes {
				r := report(fmt.Sprintf("b%03d", n), "ib-a", 1)
				r.PeerAddr = fmt.Sprintf("127.0.0.1:%d", 20000+n)
				if _, err := admin.PostReport(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			rep := func(node string, i int) api.SwarmReport {
				r := api.SwarmReport{Node: node, Source: src(i), SHA256: sum(i), Size: size, ChunkSize: 1 << 20}
				r.Have = api.SetChunk(r.Have, 0)
				return r
			}
			for i := range swarms {
				if _, err := admin.Swarm(ctx, rep(fmt.Sprintf("b%03d", i/swarmsPerNode), i)); err != nil {
					b.Fatal(err)
				}
			}
			body, err := json.Marshal(rep("b000", 0))
			if err != nil {
				b.Fatal(err)
			}
			h := e.srv.Handler()
			b.ResetTimer()
			for range b.N {
				req := httptest.NewRequest(http.MethodPost, "/"+api.Version+"/swarm", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testTokens.Admin)
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("swarm report: %d %s", w.Code, w.Body)
				}
			}
			b.StopTimer()
			e.srv.swarms.mu.Lock()
			got := len(e.srv.swarms.m)
			e.srv.swarms.mu.Unlock()
			if got != swarms {
				b.Fatalf("%d swarms in the registry, want %d", got, swarms)
			}
		})
	}
}

// BenchmarkSwarmPlanMembers is the cost of one report in a swarm of 1,000
// members (issue 24, 3e: Members went out in every plan), through the real
// handler, and the size of the plan it is answered with, for a member that
// holds the members' list (members_version) and one that does not. Half the
// members hold chunks (peers, with their bitmaps); every member is listed
// in Members with its address.
//
//	go test ./coordinator -run '^$' -bench SwarmPlanMembers -benchtime 2000x
func BenchmarkSwarmPlanMembers(b *testing.B) {
	const members = 1000
	node := func(n int) string { return fmt.Sprintf("node%04d", n) }
	addr := func(n int) string { return fmt.Sprintf("10.1.%d.%d", n/250, n%250+1) }
	// Slurm's node list, with each node's address: the plan binds members
	// to them, as at a site with munge_socket or fabric_features.
	known := make([]KnownNode, members)
	for n := range known {
		known[n] = KnownNode{Name: node(n), Addrs: []string{addr(n)}, Features: []string{"ib-a"}}
	}
	e := newEnv(b, Config{ReportInterval: 30 * time.Second, SwarmMinChunk: 16 << 20, FabricFeatures: []string{"ib-a", "ib-b"},
		Nodes: &fixedNodes{nodes: known}}, testTokens)
	ctx := context.Background()
	admin := e.client(testTokens.Admin)
	const size int64 = 140e9 // a 140 GB model: 8,345 chunks of 16 MiB
	src, sum := "https://origin.example/m/big.gguf", fmt.Sprintf("%064x", 7)
	if _, err := admin.PutModel(ctx, api.Model{Name: "big", Source: src, SHA256: sum, Size: size}); err != nil {
		b.Fatal(err)
	}
	for n := range members {
		r := report(node(n), "ib-a", 1)
		r.PeerAddr = addr(n) + ":8421"
		if _, err := admin.PostReport(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	chunks := int((size + (16<<20 - 1)) / (16 << 20))
	rep := func(n int) api.SwarmReport {
		r := api.SwarmReport{Node: node(n), Source: src, SHA256: sum, Size: size, ChunkSize: 16 << 20}
		if n%2 == 1 {
			// A member half-way, its chunks spread over the file.
			for i := n % 7; i < chunks; i += 2 {
				r.Have = api.SetChunk(r.Have, i)
			}
		}
		return r
	}
	var last api.SwarmPlan
	for n := range members {
		p, err := admin.Swarm(ctx, rep(n))
		if err != nil {
			b.Fatal(err)
		}
		last = p
	}
	for _, c := range []struct {
		name    string
		version uint64
	}{{"members sent", 0}, {"members held", last.MembersVersion}} {
		b.Run(c.name, func(b *testing.B) {
			r := rep(0)
			r.MembersVersion = c.version
			body, err := json.Marshal(r)
			if err != nil {
				b.Fatal(err)
			}
			h := e.srv.Handler()
			var planBytes, membersBytes int
			b.ResetTimer()
			for range b.N {
				req := httptest.NewRequest(http.MethodPost, "/"+api.Version+"/swarm", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testTokens.Admin)
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("swarm report: %d %s", w.Code, w.Body)
				}
				planBytes = w.Body.Len()
				if membersBytes == 0 {
					var p api.SwarmPlan
					if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
						b.Fatal(err)
					}
					m, _ := json.Marshal(p.Members)
					membersBytes = len(m)
					if p.Members == nil {
						membersBytes = -1
					}
				}
			}
			b.ReportMetric(float64(planBytes), "plan-bytes")
			b.ReportMetric(float64(max(membersBytes, 0)), "members-bytes")
		})
	}
}
