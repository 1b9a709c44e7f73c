package evict

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return now.Add(-d) }

func names(ds []Decision) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Name)
	}
	return strings.Join(s, " ")
}

func TestPlanOrder(t *testing.T) {
	entries := []Entry{
		{Name: "w-old-shared", Size: 10, Class: Wanted, Model: "a", LastUsed: ago(30 * time.Hour)},
		{Name: "w-last-recent", Size: 10, Class: Wanted, Model: "b", LastUsed: ago(time.Hour)},
		{Name: "w-last-old", Size: 10, Class: Wanted, Model: "c", LastUsed: ago(30 * 24 * time.Hour)},
		{Name: "w-new-shared", Size: 10, Class: Wanted, Model: "d", LastUsed: ago(time.Minute)},
		{Name: "sup", Size: 10, Class: Superseded, Model: "a", Written: ago(100 * time.Hour)},
		{Name: "unw-new", Size: 10, Class: Unwanted, Written: ago(time.Hour)},
		{Name: "unw-old", Size: 10, Class: Unwanted, Written: ago(50 * time.Hour)},
		{Name: "in-use", Size: 10, Class: Unwanted, InUse: "job 7"},
		{Name: "fetching", Size: 10, Class: Unwanted, Fetching: true},
	}
	fab := Fabric{Others: map[string]int{"a": 2, "d": 1}}
	res := Plan(entries, 1000, fab, Policy{Now: now})
	if got, want := names(res.Evict), "unw-old unw-new sup w-old-shared w-new-shared w-last-old"; got != want {
		t.Errorf("evicted %q, want %q", got, want)
	}
	if res.Short != 1000-60 || res.Freed != 60 {
		t.Errorf("freed %d short %d", res.Freed, res.Short)
	}
	held := map[string]string{}
	for _, d := range res.Held {
		held[d.Name] = d.Reason
	}
	for name, want := range map[string]string{"in-use": "in use by job 7", "fetching": "fetch is under way", "w-last-recent": "the last copy in this fabric of model b"} {
		if !strings.Contains(held[name], want) {
			t.Errorf("%s held for %q, want it to say %q", name, held[name], want)
		}
	}
	// Enough is enough: need 15 takes the two unwanted files only.
	if got := names(Plan(entries, 15, fab, Policy{Now: now}).Evict); got != "unw-old unw-new" {
		t.Errorf("need 15: evicted %q", got)
	}
}

// Without the coordinator's answer, no copy of a recently used model goes:
// any of them could be the fabric's last.
func TestPlanWithoutAnAnswer(t *testing.T) {
	entries := []Entry{
		{Name: "recent", Size: 10, Class: Wanted, Model: "a", LastUsed: ago(time.Hour)},
		{Name: "stale", Size: 10, Class: Wanted, Model: "b", LastUsed: ago(30 * 24 * time.Hour)},
	}
	res := Plan(entries, 100, Fabric{Err: errors.New("coordinator down")}, Policy{Now: now})
	if names(res.Evict) != "stale" || len(res.Held) != 1 || !strings.Contains(res.Held[0].Reason, "coordinator down") {
		t.Errorf("evicted %q, held %+v", names(res.Evict), res.Held)
	}
	// The fabric's last use counts as well as this node's.
	res = Plan(entries, 100, Fabric{Others: map[string]int{}, LastUsed: map[string]time.Time{"b": ago(time.Hour)}}, Policy{Now: now})
	if len(res.Evict) != 0 {
		t.Errorf("evicted %q though both are last copies used within the week", names(res.Evict))
	}
	// keep_last_copy_for negative protects nothing.
	if got := names(Plan(entries, 100, Fabric{Err: errors.New("x")}, Policy{Now: now, KeepLastCopyFor: -1}).Evict); got != "stale recent" {
		t.Errorf("keep_last_copy_for off: evicted %q", got)
	}
}

func TestBudget(t *testing.T) {
	b := Budget{Cached: 850, Free: 150, Reserve: 0}
	if b.Usable() != 1000 || b.Pressure() != 0 {
		t.Fatalf("usable %d pressure %d", b.Usable(), b.Pressure())
	}
	b.Claimed = 100 // 950 committed > 900: down to 800
	if b.Pressure() != 150 {
		t.Errorf("pressure %d, want 150", b.Pressure())
	}
	if ev, ok, _ := b.Claim(40, Job); !ok || ev != 0 {
		t.Errorf("claim 40 as a job: evict %d ok %v; want it to fit", ev, ok)
	}
	if ev, ok, _ := b.Claim(120, Job); !ok || ev != 70 {
		t.Errorf("claim 120 as a job: evict %d ok %v; want 70 evicted", ev, ok)
	}
	if _, ok, why := b.Claim(10, Prefetch); ok || !strings.Contains(why, "low watermark") {
		t.Errorf("a prefetch above the low watermark: ok %v (%s)", ok, why)
	}
	if _, ok, _ := (Budget{Cached: 100, Free: 900}).Claim(600, Prefetch); !ok {
		t.Error("a prefetch below the low watermark was refused")
	}
	if _, ok, why := b.Claim(2000, Job); ok || !strings.Contains(why, "more than llmgw may use") {
		t.Errorf("claim 2000 of 1000: ok %v (%s)", ok, why)
	}
}

// What a prefetch brought that no job has used goes first within its
// class, before older copies jobs used, and never jumps a class: an
// unwanted file a job used still goes before a wanted prefetched one.
// Among the prefetched, replicated copies go before last copies; a
// prefetched last copy goes before a replicated copy jobs used, and the
// keep_last_copy_for guard still holds for it.
func TestPlanPrefetchedFirstWithinItsClass(t *testing.T) {
	entries := []Entry{
		{Name: "w-used-old", Size: 10, Class: Wanted, Model: "a", LastUsed: ago(300 * time.Hour)},
		{Name: "w-pre-new", Size: 10, Class: Wanted, Model: "b", Written: ago(time.Hour), Prefetched: true},
		{Name: "w-pre-last", Size: 10, Class: Wanted, Model: "c", Written: ago(2 * time.Hour), Prefetched: true},
		{Name: "sup-used", Size: 10, Class: Superseded, Model: "a", LastUsed: ago(400 * time.Hour)},
		{Name: "sup-pre", Size: 10, Class: Superseded, Model: "b", Written: ago(time.Minute), Prefetched: true},
		{Name: "unw-used", Size: 10, Class: Unwanted, Written: ago(500 * time.Hour)},
	}
	fab := Fabric{Others: map[string]int{"a": 1, "b": 1}}
	res := Plan(entries, 1000, fab, Policy{Now: now})
	if got, want := names(res.Evict), "unw-used sup-pre sup-used w-pre-new w-pre-last w-used-old"; got != want {
		t.Errorf("evicted %q, want %q", got, want)
	}
	for _, d := range res.Evict {
		if pre := strings.Contains(d.Name, "pre"); pre != strings.Contains(d.Reason, "a prefetch brought it and no job used it") {
			t.Errorf("%s evicted because %q; want the reason to say a prefetch brought it exactly when one did", d.Name, d.Reason)
		}
	}
	if got := names(Plan(entries, 25, fab, Policy{Now: now}).Evict); got != "unw-used sup-pre sup-used" {
		t.Errorf("need 25: evicted %q", got)
	}
	// The fabric's last copy of a model a job used within the week is
	// kept, prefetched or not.
	recent := []Entry{{Name: "w-pre", Size: 10, Class: Wanted, Model: "c", Prefetched: true, Written: ago(time.Hour), LastUsed: ago(time.Hour)}}
	if res := Plan(recent, 10, Fabric{Others: map[string]int{}, LastUsed: map[string]time.Time{"c": ago(time.Hour)}}, Policy{Now: now}); len(res.Evict) != 0 {
		t.Errorf("a prefetched fabric's last copy of a model used an hour ago was evicted: %+v", res.Evict)
	}
}
