package coordinator

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/placement"
)

// metrics are the coordinator's Prometheus metrics, on a registry of its
// own so that two servers in one process (tests) do not collide and only
// what is listed here is exported.
//
// No label carries a job id, a path or a node name: those are unbounded
// and belong in status, not in long-lived series. Model names are bounded
// by the catalog, which only admins change. Fabric names come from
// reports, so whoever can post one chooses them: only fabrics of nodes
// Slurm knows get a label, at most MaxFabricLabels of them (see
// fabricLabels), and the rest are counted under "other".
type metrics struct {
	reg      *prometheus.Registry
	reports  *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	dbErrors *prometheus.CounterVec
	fetched  prometheus.Counter
}

var (
	nodesDesc = prometheus.NewDesc("llmgw_coordinator_nodes",
		"Nodes the coordinator has heard from, by state (ok, stale, never-looked).",
		[]string{"state"}, nil)
	holdersDesc = prometheus.NewDesc("llmgw_coordinator_model_holders",
		"Fresh nodes holding a complete copy of a catalog model, per fabric and kind (shared filer or local copy).",
		[]string{"model", "fabric", "kind"}, nil)
	fetchesDesc = prometheus.NewDesc("llmgw_coordinator_fetches_in_progress",
		"Fetches of catalog models that fresh nodes report in progress.",
		nil, nil)
	stalledDesc = prometheus.NewDesc("llmgw_coordinator_fetches_stalled",
		"Fetches in progress that have made no progress for longer than the stall threshold.",
		nil, nil)
	gcHeldDesc = prometheus.NewDesc("llmgw_coordinator_nodes_gc_held",
		"Fresh nodes whose gc removes nothing because they do not trust the catalog (a coordinator restored or moved): 'llmgw gc --trust' adopts it.",
		nil, nil)
)

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_coordinator_reports_total",
			Help: "Agent reports received, by result: stored, dropped (older than one already stored), invalid, error (not stored).",
		}, []string{"result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmgw_coordinator_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route pattern and status code.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "code"}),
		dbErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_coordinator_db_errors_total",
			Help: "Database operations that failed, by operation (ingest, catalog, read, ping).",
		}, []string{"op"}),
		fetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmgw_coordinator_fetched_bytes_total",
			Help: "Bytes that nodes' fetches were seen to advance by between their reports (an approximation: the last stretch of a fetch that finishes between two reports is not seen).",
		}),
	}
	// Every result and op starts at zero, so a rate() over them works
	// before the first error rather than after it.
	for _, r := range []string{"stored", "dropped", "invalid", "error"} {
		m.reports.WithLabelValues(r)
	}
	for _, op := range []string{"ingest", "catalog", "read", "ping"} {
		m.dbErrors.WithLabelValues(op)
	}
	m.reg.MustRegister(m.reports, m.latency, m.dbErrors, m.fetched, &stateCollector{s}, &swarmCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// stateCollector turns the view into gauges at scrape time, from the same
// fold status uses, so the two never disagree.
type stateCollector struct{ s *Server }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodesDesc
	ch <- holdersDesc
	ch <- fetchesDesc
	ch <- stalledDesc
	ch <- gcHeldDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.view.mu.RLock()
	defer s.view.mu.RUnlock()
	now := s.now()
	f := s.fold(now)
	ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(f.Counts.OK), api.NodeOK)
	ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(f.Counts.Stale), api.NodeStale)
	ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(f.Counts.NeverLooked), api.NodeNeverLooked)
	// Every catalog model in every fabric, zeros included: "no holder in
	// ib-b" is the series an alert wants to see.
	var fetching, stalled int
	labels := s.fabricLabels()
	type key struct{ model, fabric, kind string }
	holders := map[key]int{}
	for name, fa := range f.Fabrics {
		label, ok := labels[name]
		if !ok {
			label = otherFabric
		}
		for mi, m := range s.view.cat.Models {
			g := &fa.Groups[mi]
			holders[key{m.Name, label, api.HoldShared}] += len(g.Shared)
			holders[key{m.Name, label, api.HoldLocal}] += len(g.Local)
			fetching += len(g.Fetching)
			for _, nf := range g.Fetching {
				if placement.FetchProgress(nf.Node, nf.Fetch, now, s.cfg.StallAfter).Stalled {
					stalled++
				}
			}
		}
	}
	for k, n := range holders {
		ch <- prometheus.MustNewConstMetric(holdersDesc, prometheus.GaugeValue, float64(n), k.model, k.fabric, k.kind)
	}
	ch <- prometheus.MustNewConstMetric(fetchesDesc, prometheus.GaugeValue, float64(fetching))
	ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, float64(stalled))
	held := 0
	for _, g := range s.gcHeld(now) {
		held += g.Count
	}
	ch <- prometheus.MustNewConstMetric(gcHeldDesc, prometheus.GaugeValue, float64(held))
}

// MaxFabricLabels bounds the fabric label's values: a cluster has a handful
// of fabrics, and 3,000 fabricated ones made 6,000 series and slowed every
// scrape, and with it report handling.
const MaxFabricLabels = 64

// otherFabric is the label of every fabric not given its own.
const otherFabric = "other"

// fabricLabels returns the fabrics that get their own label value: those
// reported by nodes in Slurm's node list (when the reconciler has read
// it; before, by any node), the MaxFabricLabels with the most such nodes,
// ties by name. The caller holds s.view.mu.
func (s *Server) fabricLabels() map[string]string {
	count := map[string]int{}
	for name, n := range s.view.nodes {
		if len(s.view.slurm) > 0 {
			if _, known := s.view.slurm[name]; !known {
				continue
			}
		}
		count[n.Fabric]++
	}
	names := make([]string, 0, len(count))
	for f := range count {
		names = append(names, f)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(count[b], count[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	out := make(map[string]string, min(len(names), MaxFabricLabels))
	for _, f := range names[:min(len(names), MaxFabricLabels)] {
		out[f] = f
	}
	return out
}
