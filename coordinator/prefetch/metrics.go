package prefetch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/api"
)

type metrics struct {
	calls    prometheus.Counter
	errors   prometheus.Counter
	lastRead prometheus.Gauge
	starts   *prometheus.CounterVec
	jobs     *prometheus.GaugeVec
	bytes    prometheus.Collector
}

func newMetrics(p *Prefetcher) *metrics {
	m := &metrics{
		calls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmgw_coordinator_prefetch_slurm_calls_total",
			Help: "Calls the prefetcher made to slurmctld (squeue for the plans, scontrol show config for bf_interval); its rate is at most one per backfill interval.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmgw_coordinator_prefetch_read_errors_total",
			Help: "Reads of the pending jobs' plans that failed.",
		}),
		lastRead: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmgw_coordinator_prefetch_last_read_timestamp_seconds",
			Help: "When the prefetcher last read the pending jobs' plans.",
		}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_coordinator_job_starts_total",
			Help: "llmgw jobs that started, by start: warm when the Prolog took the fast path on every node of the job, cold otherwise.",
		}, []string{"start"}),
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_coordinator_prefetch_jobs",
			Help: "Pending jobs naming a model that the prefetcher watches, by state (watching, asked, warm, held).",
		}, []string{"state"}),
	}
	m.bytes = &bytesCollector{p}
	for _, s := range []string{"warm", "cold"} {
		m.starts.WithLabelValues(s)
	}
	for _, s := range []string{api.PlanWatching, api.PlanAsked, api.PlanWarm, api.PlanHeld} {
		m.jobs.WithLabelValues(s)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.errors, m.lastRead, m.starts, m.jobs, m.bytes}
}

func (m *metrics) setJobs(st []api.PrefetchStatus) {
	n := map[string]int{}
	for _, s := range st {
		n[s.State]++
	}
	for _, s := range []string{api.PlanWatching, api.PlanAsked, api.PlanWarm, api.PlanHeld} {
		m.jobs.WithLabelValues(s).Set(float64(n[s]))
	}
}

var prefetchBytesDesc = prometheus.NewDesc("llmgw_coordinator_prefetch_bytes",
	"Bytes the nodes' prefetches fetched since their agents started, as last reported, by use: fetched, and used (a job then started with them). fetched - used is what no job used.",
	[]string{"use"}, nil)

type bytesCollector struct{ p *Prefetcher }

func (c *bytesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- prefetchBytesDesc }

func (c *bytesCollector) Collect(ch chan<- prometheus.Metric) {
	c.p.mu.Lock()
	var b api.PrefetchBytes
	for _, nb := range c.p.bytes {
		b.Fetched += nb.Fetched
		b.Used += nb.Used
	}
	c.p.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(prefetchBytesDesc, prometheus.GaugeValue, float64(b.Fetched), "fetched")
	ch <- prometheus.MustNewConstMetric(prefetchBytesDesc, prometheus.GaugeValue, float64(b.Used), "used")
}
