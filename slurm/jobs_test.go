package slurm

import (
	"reflect"
	"testing"
)

func TestPreferTerms(t *testing.T) {
	for _, c := range []struct {
		prefer string
		want   []PreferTerm
		rest   string
	}{
		{"llmgw.m1", []PreferTerm{{"llmgw.m1", 1}}, ""},
		{"(ib-a)&llmgw.m1*2", []PreferTerm{{"llmgw.m1", 2}}, "(ib-a)"},
		{"[ib-a|ib-b]&(big)&llmgw.m-2.5", []PreferTerm{{"llmgw.m-2.5", 1}}, "[ib-a|ib-b]&(big)"},
		{"(ib-a|llmgw.m1)", nil, "(ib-a|llmgw.m1)"}, // inside the user's part: not ours to drop
		{"ib-a", nil, "ib-a"},
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
	if !Satisfiable([]PreferTerm{{"llmgw.m1", 1}}, nodes) {
		t.Error("one holder, one asked for: want satisfiable")
	}
	if Satisfiable([]PreferTerm{{"llmgw.m1", 2}}, nodes) {
		t.Error("one holder, two asked for: want not satisfiable")
	}
	if Satisfiable([]PreferTerm{{"llmgw.m2", 1}}, nodes) {
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
