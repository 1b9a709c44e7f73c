package prefetch

import (
	"fmt"
	"strings"
	"time"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/slurm"
)

// DefaultWarmMax is the longest a job that asked to wait for its weights
// (--llmgw-warm) is held: long enough for a large model to cross a slow
// link, short of burst_buffer/lua's StageInTimeout, past which Slurm holds
// the job for good.
const DefaultWarmMax = 10 * time.Minute

// maxWarmJobs bounds the jobs whose first question is remembered.
const maxWarmJobs = 10_000

// Warm answers whether pending job may start (GET /v1/prefetch/jobs/{id}).
// model and nodes are what the caller knows ("" when nothing): from 23.02
// burst_buffer/lua gives its script the job's planned nodes. The bound
// counts from the first question about the job.
func (p *Prefetcher) Warm(job, model, nodes string) api.WarmAnswer {
	now := p.now()
	p.mu.Lock()
	first, ok := p.warmAsked[job]
	if !ok {
		if len(p.warmAsked) >= maxWarmJobs {
			for id, t := range p.warmAsked {
				if now.Sub(t) > 2*p.warmMax() {
					delete(p.warmAsked, id)
				}
			}
		}
		if len(p.warmAsked) < maxWarmJobs {
			p.warmAsked[job] = now
		}
		first = now
	}
	var plan []string
	j := p.jobs[job]
	if j != nil {
		if model == "" {
			model = j.model
		}
		plan = j.acted
		if plan == nil {
			plan = j.plan
		}
	}
	p.mu.Unlock()

	a := api.WarmAnswer{Job: job, Model: model, Waited: now.Sub(first).Seconds(), Bound: p.warmMax().Seconds()}
	if nodes != "" {
		if ns, err := slurm.Expand(nodes); err == nil {
			plan = ns
		}
	}
	a.Nodes = slurm.Compress(plan)
	ready := func(why string) api.WarmAnswer { a.Ready, a.Why = true, why; return a }
	if now.Sub(first) >= p.warmMax() {
		return ready(fmt.Sprintf("waited the bound of %s", p.warmMax()))
	}
	if model == "" {
		// Only a job naming a model gets llmgw's directive; one the
		// reads have not shown yet (just submitted; 22.05's script
		// cannot say the model) is waited for, within the bound.
		a.Why = "not among the pending jobs read yet"
		return a
	}
	m, ok := p.presence.Model(model)
	switch {
	case !ok:
		return ready("model " + model + " is not in the catalog; nothing to wait for")
	case m.Why != "":
		return ready("model " + model + ": " + m.Why + "; nothing to wait for")
	}
	if len(plan) == 0 {
		a.Why = "no plan from backfill yet"
		return a
	}
	var lacking []string
	for _, n := range plan {
		node, ok := p.presence.Node(n)
		if !ok || !node.Holds(model) {
			lacking = append(lacking, n)
		}
	}
	if len(lacking) == 0 {
		return ready("every planned node holds " + model)
	}
	a.Why = fmt.Sprintf("%s of %d planned nodes lack %s (%s)", fmt.Sprint(len(lacking)), len(plan), model, strings.TrimSpace(slurm.Compress(lacking)))
	return a
}

func (p *Prefetcher) warmMax() time.Duration {
	if p.cfg.WarmMax > 0 {
		return p.cfg.WarmMax
	}
	return DefaultWarmMax
}
