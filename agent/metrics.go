package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Report results, the values of llmgw_agent_reports_total's result label.
// A small fixed set, so that an alert can say which way the coordinator is
// failing without a label per error message.
const (
	resultOK          = "ok"
	resultUnreachable = "unreachable"  // no HTTP answer: refused, timeout, DNS
	resultRejected    = "rejected"     // 401/403: the token is wrong or missing
	resultServerError = "server_error" // 5xx
	resultBadRequest  = "bad_request"  // another 4xx: this agent sent something the coordinator refuses
	resultBadAnswer   = "bad_answer"   // 2xx whose body is not JSON: a proxy or a wrong URL
	resultNoToken     = "no_token"     // the token file could not be read
)

var reportResults = []string{resultOK, resultUnreachable, resultRejected, resultServerError, resultBadRequest, resultBadAnswer, resultNoToken}

// metrics are the agent's Prometheus series, on a registry of its own so
// that two agents in one test process do not collide, and so that /metrics
// shows only what this agent exports (plus the Go runtime and process).
type metrics struct {
	reg *prometheus.Registry

	scanDuration      prometheus.Histogram
	weights           *prometheus.GaugeVec
	fetchedBytes      prometheus.Counter
	swarmBytes        *prometheus.CounterVec
	swarmServed       prometheus.Counter
	swarmPeerFailures *prometheus.CounterVec
	peerServerUp      prometheus.Gauge
	fetchErrors       prometheus.Counter
	reports           *prometheus.CounterVec
	catalogReads      prometheus.Counter
	lastReportSuccess prometheus.Gauge
	lastScanSuccess   prometheus.Gauge
	info              *prometheus.GaugeVec
	evictions         *prometheus.CounterVec
	evictedBytes      *prometheus.CounterVec
	evictHeld         prometheus.Gauge
	gcHeld            prometheus.Gauge
	// Issue 28: what prefetches fetched and what jobs then used; job
	// starts by whether the fast path found the weights.
	prefetchBytes *prometheus.CounterVec
	jobStarts     *prometheus.CounterVec
}

func newMetrics(version string, fetchesInProgress func() float64) *metrics {
	const ns, sub = "llmgw", "agent"
	m := &metrics{
		reg: prometheus.NewRegistry(),
		scanDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "scan_duration_seconds",
			Help: "Time one scan of every weight directory and the cache took.",
			// From a warm local disk to a filer at its timeout.
			Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60},
		}),
		weights: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "weights",
			Help: "Weights the last scan found, by storage kind and completeness.",
		}, []string{"kind", "complete"}),
		fetchedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "fetched_bytes_total",
			Help: "Bytes fetched into the cache by this agent.",
		}),
		swarmBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "swarm_received_bytes_total",
			Help: "Bytes a swarm fetch received, by where from (origin; peer, chunks that landed verified; peer_discarded, peers' bytes thrown away on a cut stream or a digest mismatch): one copy per fabric means the origin's share is one file per fabric.",
		}, []string{"from"}),
		swarmServed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "swarm_served_bytes_total",
			Help: "Bytes this node's chunk server sent to peers of its fabric: which node fed the others, and that no other fabric's did.",
		}),
		swarmPeerFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "swarm_peer_failures_total",
			Help: "Reads from a peer that failed, by why: unreachable (no connection, no answer, a body that stopped), refused (404, 416 or 503 for a chunk its plan entry says it holds), busy (its upload slots full), slow (under the floor rate of a peer read), bad (a chunk that does not match its digest). All but busy and bad peers are reported to the coordinator.",
		}, []string{"why"}),
		peerServerUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "peer_server_up",
			Help: "1 while the chunk server serves the fabric at the peer address; 0 when it does not (another process holds the address: the agent retries and says why in its status), or when no peer address is set.",
		}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "fetch_errors_total",
			Help: "Fetches that failed (each counted once, however many hooks waited on it).",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "reports_total",
			Help: "Attempts to report to the coordinator, by result.",
		}, []string{"result"}),
		catalogReads: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "catalog_reads_total",
			Help: "Times the catalog was read from the coordinator after a report: only when the report's answer names another catalog than the node's copy (every report, from a coordinator older than that).",
		}),
		lastReportSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "last_report_success_timestamp_seconds",
			Help: "When the coordinator last accepted a report, as a Unix time.",
		}),
		lastScanSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "last_scan_success_timestamp_seconds",
			Help: "When the last scan finished, as a Unix time.",
		}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "info",
			Help: "The agent's version; the value is always 1.",
		}, []string{"version"}),
	}
	m.prefetchBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "prefetch_bytes_total",
		Help: "Bytes fetched for prefetches (no job waiting), by use: fetched, and used (a job then started with the file). fetched - used is what no job used yet.",
	}, []string{"use"})
	m.jobStarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "job_starts_total",
		Help: "llmgw jobs whose Prolog ran on this node, by start: warm when the fast path found the weights present, cold when llmgw prolog had to fetch them or say why not.",
	}, []string{"start"})
	for _, l := range []string{"fetched", "used"} {
		m.prefetchBytes.WithLabelValues(l)
	}
	for _, l := range []string{"warm", "cold"} {
		m.jobStarts.WithLabelValues(l)
	}
	m.evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "evictions_total",
		Help: "Cache entries evicted under pressure, by class (unwanted, superseded, wanted) and trigger (watermark: above cache_high; fetch: a fetch that did not fit).",
	}, []string{"class", "trigger"})
	m.evictedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "evicted_bytes_total",
		Help: "Bytes freed by eviction, by class.",
	}, []string{"class"})
	m.evictHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Subsystem: sub, Name: "evict_short_bytes",
		Help: "Bytes the last eviction pass could not free: what jobs, fetches and fabrics' last copies hold (0 when it freed what it needed).",
	})
	m.gcHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Subsystem: sub, Name: "gc_held",
		Help: "1 while this node's gc is held by a catalog it does not trust (another identity, an older state): 'llmgw gc --trust' adopts it.",
	})
	for _, c := range []string{"unwanted", "superseded", "wanted"} {
		m.evictedBytes.WithLabelValues(c)
		for _, tr := range []string{"watermark", "fetch"} {
			m.evictions.WithLabelValues(c, tr)
		}
	}
	inProgress := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: ns, Subsystem: sub, Name: "fetches_in_progress",
		Help: "Fetches moving bytes right now, prefetches included (their report entries say prefetch).",
	}, fetchesInProgress)
	for _, r := range reportResults {
		m.reports.WithLabelValues(r)
	}
	for _, kind := range []string{"shared", "local"} {
		for _, c := range []string{"true", "false"} {
			m.weights.WithLabelValues(kind, c)
		}
	}
	m.swarmBytes.WithLabelValues("origin")
	m.swarmBytes.WithLabelValues("peer")
	m.swarmBytes.WithLabelValues("peer_discarded")
	for _, why := range []string{"unreachable", "refused", "busy", "slow", "bad"} {
		m.swarmPeerFailures.WithLabelValues(why)
	}
	m.info.WithLabelValues(version).Set(1)
	m.reg.MustRegister(m.scanDuration, m.weights, m.fetchedBytes, m.swarmBytes, m.swarmServed, m.swarmPeerFailures, m.peerServerUp, m.fetchErrors, m.reports, m.catalogReads,
		m.lastReportSuccess, m.lastScanSuccess, m.info, inProgress, m.evictions, m.evictedBytes, m.evictHeld, m.gcHeld,
		m.prefetchBytes, m.jobStarts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
