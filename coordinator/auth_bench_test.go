package coordinator

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/munge/mungetest"
)

// BenchmarkCoordinatorMunge is BenchmarkCoordinator's ingest with MUNGE
// authentication on: every report carries a credential the coordinator
// decodes through its own munged (munge.Wire, munged's protocol from Go)
// and binds to the node. One munged plays every node (10,000 daemons would measure
// the machine, not the coordinator), so every node's address is its
// origin; the lookup and the comparison are still made per report. The
// credentials are made before the clock starts: agents make them on their
// own nodes. munged's own CPU is on the same two cores, so the rates
// include it; it is printed beside this process's CPU per report.
func BenchmarkCoordinatorMunge(b *testing.B) {
	ctx := context.Background()
	realm := mungetest.New(b)
	coord := realm.Start("127.0.0.1")
	node := munge.New(realm.Start("127.0.0.2").Socket())
	models, reports := benchCluster()
	known := make([]KnownNode, len(reports))
	for i, r := range reports {
		known[i] = KnownNode{Name: r.Node, Addrs: []string{"127.0.0.2"}}
	}
	creds := func(bodies [][]byte) []string {
		out := make([]string, len(bodies))
		auth := munge.Authenticator{Codec: node}
		for i, body := range bodies {
			h, err := auth.Authorization(ctx, http.MethodPost, "/v1/reports", body)
			if err != nil {
				b.Fatal(err)
			}
			out[i] = h
		}
		return out
	}
	// run ingests every node's first and steady report through a fresh
	// coordinator, over plain HTTP or, with withTLS, over TLS as Serve
	// speaks it, and prints the figures.
	run := func(withTLS bool) {
		first := encodeAll(b, reports, 1)
		steady := encodeAll(b, reports, 2)
		cfg := Config{MungeSocket: coord.Socket(), Nodes: &fixedNodes{nodes: known}, SlurmUser: "0"}
		var clientTLS *tls.Config
		label, metric, phase := "MUNGE", "", ""
		if withTLS {
			ca := newTestCA(b, "bench-ca")
			cfg.TLSCert, cfg.TLSKey = ca.issue(b, b.TempDir(), "coordinator")
			pool := x509.NewCertPool()
			pool.AddCert(ca.cert)
			clientTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
			label, metric, phase = "MUNGE and TLS", "tls-", "tls-"
		}
		e := newEnv(b, cfg, testTokens)
		e.srv.now = time.Now
		for _, m := range models {
			if _, err := e.admin.PutModel(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		url := e.url
		if withTLS {
			// The same server, served as `llmgw coordinator` serves it:
			// Serve wraps the listener in TLS.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			sctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- e.srv.Serve(sctx, ln) }()
			defer func() {
				cancel()
				<-done
			}()
			url = "https://" + ln.Addr().String()
		}
		firstAuth := creds(first)
		m0 := realm.CPU(coord)
		b0, r0 := e.srv.batches.Load(), e.srv.batched.Load()
		firstRate, firstCPU := postAll(b, phase+"first", url, clientTLS, first, firstAuth)
		firstBatch := batchSize(e.srv, b0, r0)
		m1 := realm.CPU(coord)
		steadyAuth := creds(steady)
		b0, r0 = e.srv.batches.Load(), e.srv.batched.Load()
		steadyRate, steadyCPU := postAll(b, phase+"steady", url, clientTLS, steady, steadyAuth)
		steadyBatch := batchSize(e.srv, b0, r0)
		m2 := realm.CPU(coord)
		firstMunged := float64((m1 - m0).Microseconds()) / float64(len(first))
		steadyMunged := float64((m2 - m1).Microseconds()) / float64(len(steady))
		b.ReportMetric(firstRate, metric+"first-reports/s")
		b.ReportMetric(steadyRate, metric+"steady-reports/s")
		b.ReportMetric(firstCPU, metric+"first-cpu-µs/report")
		b.ReportMetric(steadyCPU, metric+"steady-cpu-µs/report")
		b.ReportMetric(firstMunged, metric+"first-munged-cpu-µs/report")
		b.ReportMetric(steadyMunged, metric+"steady-munged-cpu-µs/report")
		fmt.Printf("ingest with %s, first reports: %8.0f reports/s  (target %d: %.2f×); %4.0f µs CPU per report in the coordinator (clients included) + %3.0f µs in its munged; %.1f reports per commit\n", label, firstRate, targetReportsPS, firstRate/targetReportsPS, firstCPU, firstMunged, firstBatch)
		fmt.Printf("ingest with %s, steady state:  %8.0f reports/s  (target %d: %.2f×); %4.0f µs CPU per report in the coordinator (clients included) + %3.0f µs in its munged; %.1f reports per commit\n", label, steadyRate, targetReportsPS, steadyRate/targetReportsPS, steadyCPU, steadyMunged, steadyBatch)
	}
	for b.Loop() {
		run(false)
		// TLS as agents use it: one handshake per connection, which an
		// agent keeps across reports (30 s apart, inside both sides' idle
		// timeouts), so what each report pays is the record layer.
		run(true)
	}
}

// BenchmarkAuthenticate is the cost of authentication per report alone:
// one report's credential checked (decoded by munged, its payload
// compared, the sender's uid judged), one request at a time. It reports
// the CPU of this process and of the coordinator's munged per report.
func BenchmarkAuthenticate(b *testing.B) {
	realm := mungetest.New(b)
	coord := realm.Start("127.0.0.1")
	node := munge.New(realm.Start("127.0.0.2").Socket())
	e := newEnv(b, Config{MungeSocket: coord.Socket(), SlurmUser: "0",
		Nodes: &fixedNodes{nodes: []KnownNode{{Name: "n1", Addrs: []string{"127.0.0.2"}}}}}, testTokens)
	body, err := json.Marshal(benchReport())
	if err != nil {
		b.Fatal(err)
	}
	auth := munge.Authenticator{Codec: node}
	creds := make([]string, b.N)
	for i := range creds {
		if creds[i], err = auth.Authorization(context.Background(), http.MethodPost, "/v1/reports", body); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu0, munged0 := cpuTime(), realm.CPU(coord)
	for i := range b.N {
		r := httptest.NewRequest(http.MethodPost, "/v1/reports", bytes.NewReader(body))
		r.Header.Set("Authorization", creds[i])
		if _, err := e.srv.authenticate(r, roleAgent); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/report")
	b.ReportMetric(float64((realm.CPU(coord)-munged0).Microseconds())/float64(b.N), "munged-cpu-µs/report")
}

// benchReport is one node's report as BenchmarkCoordinator sends it.
func benchReport() *api.Report {
	_, reports := benchCluster()
	return reports[1]
}
