package slurm

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// From Slurm 23.02 on (seen on 24.11.5 and 26.05.5, docs/slurm/RELEASES.md)
// a pending job whose --prefer no node can meet any more, because the
// preferred feature vanished from every node (a reconfigure before llmgw's
// next sync, gc of the last copy), is not left to fall back to its
// constraint: slurmctld sets its reason to BadConstraints and its priority
// to 0, and it waits, parked, for up to a minute after the feature is back,
// or for good. 22.05 keeps such a job pending on Resources and runs it.
// ParkedJobs finds the jobs llmgw's own preference parked; Unpark frees one.

// ReasonBadConstraints is squeue's %r for a parked job.
const ReasonBadConstraints = "BadConstraints"

// A ParkedJob is a pending job Slurm parked on its constraints whose
// --prefer names a feature of llmgw's.
type ParkedJob struct {
	ID     string
	Prefer string
	// Prefix is llmgw's feature prefix the job was found by.
	Prefix string
	// Terms are the llmgw terms of Prefer, each a feature with the count
	// of nodes it asks for (1 without "*k").
	Terms []PreferTerm
}

// A PreferTerm is one feature of a --prefer with its node count.
type PreferTerm struct {
	Feature string
	Count   int
	counted bool // Count came from "*k"
}

// ParkedJobs lists the pending jobs with reason BadConstraints whose
// --prefer names a feature starting with prefix. squeue picks the parked
// ones (cheap, every sync); scontrol reads each one's preference, which
// squeue prints in no format common to 22.05 through 26.05.
func (r *Runner) ParkedJobs(ctx context.Context, prefix string) ([]ParkedJob, error) {
	out, err := r.Run(ctx, "squeue", "-h", "-t", "PD", "-o", "%i %r")
	if err != nil {
		return nil, err
	}
	var jobs []ParkedJob
	for _, line := range strings.Split(string(out), "\n") {
		id, reason, _ := strings.Cut(strings.TrimSpace(line), " ")
		if reason != ReasonBadConstraints || id == "" {
			continue
		}
		show, err := r.Run(ctx, "scontrol", "-o", "show", "job", id)
		if err != nil {
			// Gone between the two calls (ran, or was cancelled): nothing
			// is parked any more.
			continue
		}
		prefer, ok := jobField(string(show), "Prefer")
		if !ok {
			return nil, fmt.Errorf("scontrol -o show job %s printed no Prefer= field; is this Slurm 22.05 or later?", id)
		}
		terms := PreferTerms(prefer, prefix)
		if len(terms) == 0 {
			continue
		}
		// A term without "*k" asks every node of the job for the feature:
		// a -N2 job preferring a feature one node has is parked as well
		// (24.11 with ignore_prefer_validation), and releasing it would
		// only park it again.
		nodes, _ := jobField(string(show), "NumNodes")
		if n, err := strconv.Atoi(strings.SplitN(nodes, "-", 2)[0]); err == nil && n > 1 {
			for i := range terms {
				if !terms[i].counted {
					terms[i].Count = n
				}
			}
		}
		jobs = append(jobs, ParkedJob{ID: id, Prefer: prefer, Prefix: prefix, Terms: terms})
	}
	return jobs, nil
}

// jobField is the value of KEY= in one line of `scontrol -o show job`,
// whose fields are space-separated KEY=value words. Prefer is never last
// and holds no spaces (Slurm refuses a feature expression with one).
func jobField(line, key string) (string, bool) {
	for _, w := range strings.Fields(line) {
		if k, v, ok := strings.Cut(w, "="); ok && k == key {
			if v == "(null)" {
				v = ""
			}
			return v, true
		}
	}
	return "", false
}

var preferTermRe = regexp.MustCompile(`^([^&|()\[\]*!]+)(?:\*([0-9]+))?$`)

// countedRe is the bracketed form Compose gives a job whose nodes cannot
// all hold the model ("[(ib-b&llmgw.m3)*1&ib-b*1]", slurm/prefer.go
// countedPrefer): the user's part, the llmgw feature and its count.
var countedRe = regexp.MustCompile(`^\[\((.+)&([^&|()\[\]*!]+)\)\*([0-9]+)&.+\*[0-9]+\]$`)

// PreferTerms are the terms of the AND expression prefer that name a
// feature starting with prefix, with their counts.
func PreferTerms(prefer, prefix string) []PreferTerm {
	var terms []PreferTerm
	if m := countedRe.FindStringSubmatch(strings.TrimSpace(prefer)); m != nil && strings.HasPrefix(m[2], prefix) {
		k, _ := strconv.Atoi(m[3])
		return []PreferTerm{{Feature: m[2], Count: max(k, 1), counted: true}}
	}
	for _, t := range strings.Split(prefer, "&") {
		m := preferTermRe.FindStringSubmatch(strings.TrimSpace(t))
		if m == nil || !strings.HasPrefix(m[1], prefix) {
			continue
		}
		k := 1
		if m[2] != "" {
			k, _ = strconv.Atoi(m[2])
		}
		terms = append(terms, PreferTerm{Feature: m[1], Count: max(k, 1), counted: m[2] != ""})
	}
	return terms
}

// WithoutTerms is prefer with its top-level terms naming a feature that
// starts with prefix taken out: what is left is the user's own constraint
// and preference, which Slurm accepted at submit.
// For the bracketed form that is the user's part alone, the fabric chosen
// at submit kept: every node the job may get meets it.
func WithoutTerms(prefer, prefix string) string {
	if m := countedRe.FindStringSubmatch(strings.TrimSpace(prefer)); m != nil && strings.HasPrefix(m[2], prefix) {
		return m[1]
	}
	var keep []string
	for _, t := range strings.Split(prefer, "&") {
		if m := preferTermRe.FindStringSubmatch(strings.TrimSpace(t)); m != nil && strings.HasPrefix(m[1], prefix) {
			continue
		}
		keep = append(keep, t)
	}
	return strings.Join(keep, "&")
}

// Unpark frees a parked job. When every llmgw term of its preference can be
// met again by nodes (active features in nodes), `scontrol release` gives
// it its priority back and it keeps its preference; otherwise its llmgw
// terms are dropped (`scontrol update JobId=… Prefer=…`) and it runs where
// its own constraint lets it, as it would have without llmgw. It says which
// it did ("released" or "dropped the preference").
func (r *Runner) Unpark(ctx context.Context, job ParkedJob, nodes []Node) (string, error) {
	if Satisfiable(job.Terms, nodes) {
		if _, err := r.Run(ctx, "scontrol", "release", job.ID); err != nil {
			return "", err
		}
		return "released", nil
	}
	rest := WithoutTerms(job.Prefer, job.Prefix)
	if _, err := r.Run(ctx, "scontrol", "update", "JobId="+job.ID, "Prefer="+rest); err != nil {
		return "", err
	}
	// The update leaves priority 0 on some releases; release is harmless
	// on a job that is not held.
	if _, err := r.Run(ctx, "scontrol", "release", job.ID); err != nil {
		return "", err
	}
	return "dropped the preference", nil
}

// Satisfiable says whether, for every term, at least Count nodes have its
// feature active.
func Satisfiable(terms []PreferTerm, nodes []Node) bool {
	for _, t := range terms {
		n := 0
		for _, node := range nodes {
			for _, f := range node.Active {
				if f == t.Feature {
					n++
					break
				}
			}
		}
		if n < t.Count {
			return false
		}
	}
	return true
}
