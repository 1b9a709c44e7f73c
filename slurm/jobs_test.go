package slurm

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestPreferTerms(t *testing.T) {
	for _, c := range []struct {
		prefer string
		want   []PreferTerm
		rest   string
	}{
		{"llmgw.m1", []PreferTerm{{"llmgw.m1", 1, false}}, ""},
		{"(ib-a)&llmgw.m1*2", []PreferTerm{{"llmgw.m1", 2, true}}, "(ib-a)"},
		{"[ib-a|ib-b]&(big)&llmgw.m-2.5", []PreferTerm{{"llmgw.m-2.5", 1, false}}, "[ib-a|ib-b]&(big)"},
		{"(ib-a|llmgw.m1)", nil, "(ib-a|llmgw.m1)"}, // inside the user's part: not ours to drop
		{"ib-a", nil, "ib-a"},
		// Compose's count beside other features, in brackets (from 23.02).
		{"[(ib-b&llmgw.m3)*1&ib-b*1]", []PreferTerm{{"llmgw.m3", 1, true}}, "ib-b"},
		{"[(ib-b&gpu&llmgw.m3)*2&(ib-b&gpu)*1]", []PreferTerm{{"llmgw.m3", 2, true}}, "ib-b&gpu"},
		{"[(ib-b&other.m3)*2&(ib-b)*1]", nil, "[(ib-b&other.m3)*2&(ib-b)*1]"},
		{"", nil, ""},
	} {
		if got := PreferTerms(c.prefer, "llmgw."); !reflect.DeepEqual(got, c.want) {
			t.Errorf("PreferTerms(%q) = %v, want %v", c.prefer, got, c.want)
		}
		if got := WithoutTerms(c.prefer, "llmgw."); got != c.rest {
			t.Errorf("WithoutTerms(%q) = %q, want %q", c.prefer, got, c.rest)
		}
	}
}

func TestSatisfiable(t *testing.T) {
	nodes := []Node{{Name: "n1", Active: []string{"ib-a", "llmgw.m1"}}, {Name: "n2", Active: []string{"ib-a"}}}
	if !Satisfiable([]PreferTerm{{Feature: "llmgw.m1", Count: 1}}, nodes) {
		t.Error("one holder, one asked for: want satisfiable")
	}
	if Satisfiable([]PreferTerm{{Feature: "llmgw.m1", Count: 2}}, nodes) {
		t.Error("one holder, two asked for: want not satisfiable")
	}
	if Satisfiable([]PreferTerm{{Feature: "llmgw.m2", Count: 1}}, nodes) {
		t.Error("no holder: want not satisfiable")
	}
}

func TestJobField(t *testing.T) {
	line := "JobId=7 JobName=wrap UserId=root(0) Priority=0 Reason=BadConstraints Features=(null) Prefer=(ib-a)&llmgw.m1 ClusterFeatures=(null)"
	if v, ok := jobField(line, "Prefer"); !ok || v != "(ib-a)&llmgw.m1" {
		t.Errorf("Prefer = %q, %v", v, ok)
	}
	if v, ok := jobField(line, "Features"); !ok || v != "" {
		t.Errorf("Features = %q, %v; want empty for (null)", v, ok)
	}
	if _, ok := jobField(line, "Nope"); ok {
		t.Error("Nope found")
	}
}

// TestParkedJobsCountsTheJobsNodes: a term without "*k" asks each of the
// job's nodes for the feature, so a -N2 job preferring a feature one node
// has cannot be served by that node, and must not be released to be
// parked again. The output is as 24.11.5 printed it.
func TestParkedJobsCountsTheJobsNodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, out string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\ncat <<'EOF'\n"+out+"\nEOF\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("squeue", "7 BadConstraints\n8 Resources\n9 BadConstraints")
	write("scontrol", "JobId=7 JobName=wrap Priority=0 JobState=PENDING Reason=BadConstraints NumNodes=2-2 NumCPUs=2 Features=(null) DelayBoot=00:00:00 Prefer=llmgw.x OverSubscribe=OK")
	r := &Runner{Dir: dir}
	jobs, err := r.ParkedJobs(context.Background(), "llmgw.")
	if err != nil {
		t.Fatal(err)
	}
	// The fake scontrol prints job 7 for 9 too; both are read the same.
	if len(jobs) != 2 || jobs[0].ID != "7" || len(jobs[0].Terms) != 1 || jobs[0].Terms[0].Count != 2 {
		t.Fatalf("ParkedJobs = %+v; want jobs 7 and 9, llmgw.x on 2 nodes", jobs)
	}
	one := []Node{{Name: "n1", Active: []string{"llmgw.x"}}, {Name: "n2"}}
	if Satisfiable(jobs[0].Terms, one) {
		t.Error("a 2-node job preferring llmgw.x, one holder: want not satisfiable (drop, not release)")
	}
}
