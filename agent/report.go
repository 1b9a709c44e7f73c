package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/fetch"
	"github.com/llmgw/llmgw/weights/scan"
)

// Bounds on what a report carries about the agent's own troubles: enough
// for an operator to see what went wrong lately, not enough to let one
// failing fetch loop grow every report without limit.
const (
	maxErrors   = 20
	maxErrorLen = 300
	// maxErrorAge drops an error not seen for this long: an outage that
	// ended this morning is not a recent error this evening.
	maxErrorAge = time.Hour
)

// reportOf builds the api.Report for an inventory. looked is whether any
// weight directory is configured: the cache directory is always scanned,
// but a node told to look nowhere says so, and must rank exactly like a
// node that looked and found nothing.
func reportOf(inv scan.Inventory, looked bool) api.Report {
	r := api.Report{Looked: looked, Weights: make([]api.Weight, 0, len(inv.Weights))}
	for _, w := range inv.Weights {
		r.Weights = append(r.Weights, api.Weight{
			Path: w.Path, Size: w.Size, Shared: w.Shared, Complete: w.Complete,
			Problem: w.Problem, ModelID: w.ModelID, Revision: w.Revision,
		})
	}
	for _, d := range inv.Dirs {
		r.Dirs = append(r.Dirs, api.DirStatus{
			Path: d.Path, Shared: d.Shared, FSType: d.FSType, Missing: d.Missing,
			Error: d.Err, Skipped: d.SkippedCount,
		})
	}
	return r
}

// fingerprint is what, in an inventory, is worth an immediate report when
// it changes: the weights and whether each directory could be read. Scan
// timings are left out, or every scan would look like a change.
func fingerprint(inv scan.Inventory) string {
	type dir struct {
		Path    string
		Missing bool
		Err     string
	}
	v := struct {
		W []scan.Local
		D []dir
	}{W: inv.Weights}
	for _, d := range inv.Dirs {
		v.D = append(v.D, dir{d.Path, d.Missing, d.Err})
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// cacheRoom reports the free and total bytes of the filesystem that holds
// dir. A cache directory that does not exist yet is created on the first
// fetch, on the filesystem of its nearest existing parent, so that is the
// room there is.
func cacheRoom(dir string) (api.Cache, error) {
	r, err := fetch.RoomFor(dir)
	return api.Cache{Dir: dir, FreeBytes: r.Free, TotalBytes: r.Total}, err
}

// hfCacheRoom is the room of cfg's Hugging Face cache when it is on
// another filesystem than the cache (a filer's, typically), else nil: the
// cache's room is then its room too. A filer that does not answer within
// the scan's directory timeout gives nil as well, and placement checks
// the cache's room, as for an agent older than this; the scan reports
// the directory as not answering.
func hfCacheRoom(cfg Config) *api.Cache {
	hf := cfg.HFCacheDir()
	if hf == "" || hf == cfg.CacheDir || strings.HasPrefix(hf, filepath.Clean(cfg.CacheDir)+"/") {
		return nil
	}
	type answer struct {
		room *api.Cache
	}
	ch := make(chan answer, 1)
	go func() {
		// Where each directory is, or would be once made: its nearest
		// existing ancestor.
		dev := func(p string) (uint64, bool) {
			for {
				var st unix.Stat_t
				err := unix.Stat(p, &st)
				if err == nil {
					return uint64(st.Dev), true
				}
				if !errors.Is(err, unix.ENOENT) || filepath.Dir(p) == p {
					return 0, false
				}
				p = filepath.Dir(p)
			}
		}
		a, okA := dev(hf)
		b, okB := dev(cfg.CacheDir)
		if !okA || !okB || a == b {
			ch <- answer{}
			return
		}
		c, err := cacheRoom(hf)
		if err != nil {
			ch <- answer{}
			return
		}
		ch <- answer{&c}
	}()
	t := time.NewTimer(cfg.FSTimeout())
	defer t.Stop()
	select {
	case r := <-ch:
		return r.room
	case <-t.C:
		return nil
	}
}

// errorRing keeps the agent's recent errors, newest last. The same message
// again only bumps its count, so a coordinator down for an hour is one
// entry, not twenty copies pushing everything else out.
type errorRing struct {
	entries []errorEntry
}

type errorEntry struct {
	first, last time.Time
	msg         string
	count       int
}

func (r *errorRing) add(now time.Time, msg string) {
	msg = strings.TrimSpace(msg)
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen] + "…"
	}
	if n := len(r.entries); n > 0 && r.entries[n-1].msg == msg {
		r.entries[n-1].last = now
		r.entries[n-1].count++
		return
	}
	r.entries = append(r.entries, errorEntry{first: now, last: now, msg: msg, count: 1})
	if len(r.entries) > maxErrors {
		r.entries = r.entries[len(r.entries)-maxErrors:]
	}
}

func (r *errorRing) strings(now time.Time) []string {
	r.entries = slices.DeleteFunc(r.entries, func(e errorEntry) bool { return now.Sub(e.last) > maxErrorAge })
	if len(r.entries) == 0 {
		return nil
	}
	out := make([]string, len(r.entries))
	for i, e := range r.entries {
		s := e.last.UTC().Format(time.RFC3339) + " " + e.msg
		if e.count > 1 {
			s += fmt.Sprintf(" (%d times since %s)", e.count, e.first.UTC().Format(time.RFC3339))
		}
		out[i] = s
	}
	return out
}

// Backoff while the coordinator does not take reports: start soon, since
// most outages are a restart, and back off to at most backoffCap, so that a
// thousand agents do not hammer a coordinator that is coming back up.
const (
	backoffBase = 2 * time.Second
	backoffCap  = 5 * time.Minute
)

// backoff is the wait after the n-th consecutive failure (n ≥ 1), with
// jitter over its upper half so that agents that failed together drift
// apart.
func backoff(n int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + rand.N(d/2+1)
}

// jitter spreads d by ±10%.
func jitter(d time.Duration) time.Duration {
	spread := d / 10
	if spread <= 0 {
		return d
	}
	return d - spread + rand.N(2*spread+1)
}

// classify names the way a report failed, for the metric's label and for
// deciding whether the failure changed since the last attempt.
func classify(err error) string {
	var ae *api.Error
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return resultOK
	case errors.As(err, &ae):
		switch {
		case ae.Status == 401 || ae.Status == 403:
			return resultRejected
		case ae.Status >= 500:
			return resultServerError
		}
		return resultBadRequest
	case errors.As(err, &se), errors.As(err, &te):
		return resultBadAnswer
	}
	return resultUnreachable
}

// skippedWhat says, for a log line, what a failed report means in practice.
// munge says the agent signs with MUNGE credentials, not a token: a refusal
// then is about the node, not a file.
func skippedWhat(result string, munge bool) string {
	switch result {
	case resultRejected:
		if munge {
			// The coordinator gives every refusal one message and logs the
			// reason; these are the reasons it can have.
			return "the coordinator refused this node's MUNGE credential (its log says why): the node name must be one Slurm knows (--node, SLURMD_NODENAME), the agent must run as root or the coordinator's agent_user, this host's munged must speak from one of the node's addresses (NodeAddr, NodeHostname; munged --origin), and its key must be the cluster's"
		}
		return "the coordinator refused this agent's token; --token-file must hold this node's own token ('llmgw nodes token NODE' on the coordinator's side), or set munge_socket"
	case resultNoToken:
		return "no report can be sent without the token"
	case resultBadAnswer:
		return "the coordinator URL answers, but not as a coordinator; check --coordinator"
	case resultBadRequest:
		return "the coordinator refused the report; versions may differ"
	}
	return "the coordinator will show this node as stale until a report gets through"
}

func sortFetches(f []api.Fetch) {
	sort.Slice(f, func(i, j int) bool {
		if !f[i].Started.Equal(f[j].Started) {
			return f[i].Started.Before(f[j].Started)
		}
		return f[i].Source < f[j].Source
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
