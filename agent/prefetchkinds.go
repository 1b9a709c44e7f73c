package agent

import (
	"context"
	"os"
	"path/filepath"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// What a prefetch fetches, by the kind of its model. An ask names a model
// and its source; a model of one file needs nothing more, and is fetched
// as the ask says. A model of several files and a Hub repository are
// fetched as the node's catalog copy has them (pfItem.model), through the
// very ensure a Prolog's slow path uses (prolog/full): a set's manifest
// first, then each file into the set directory; a Hub model as one ensure
// of the repository at its commit, into the Hugging Face cache. Each
// file's or the model's claim is held to the cache's budget (fetch.Ahead),
// so a set or a Hub model that does not fit below cache_low fetches
// nothing. A Hugging Face cache on another filesystem than the cache (a
// site's filer) is not prefetched into: the budget a prefetch keeps to is
// the cache's, and eviction does not reach there either.

// pfMeasure is what the node holds of a prefetch's model now.
type pfMeasure struct {
	present bool   // whole here: nothing to fetch
	have    int64  // its bytes on disk, partial fetches included
	need    int64  // what it still needs, when known (0: none, or unknown)
	why     string // why it is not prefetched here ("" when it is)
}

// measure looks at the node's copy of it's model: one stat per file.
func measure(cfg Config, it *pfItem) pfMeasure {
	switch m := it.model; {
	case m != nil && m.IsHub():
		return measureHub(cfg, *m.Hub)
	case m != nil && m.IsSet():
		return measureSet(cfg, *m)
	}
	target := catalog.CachePathFor(cfg.CacheDir, it.ask.Source)
	if st, err := os.Stat(target); err == nil && (it.ask.Size <= 0 || st.Size() == it.ask.Size) {
		return pfMeasure{present: true, have: st.Size()}
	}
	var ms pfMeasure
	if st, err := os.Stat(target + catalog.PartSuffix); err == nil {
		ms.have = st.Size()
	}
	ms.need = max(0, it.ask.Size-ms.have)
	return ms
}

// measureSet: every file of m whole in its set directory is the set
// present, as the scanner and the Prolog's fast path judge it.
func measureSet(cfg Config, m catalog.Model) pfMeasure {
	dir := filepath.Join(cfg.CacheDir, catalog.SetName(m))
	ms := pfMeasure{present: true}
	known := true
	for _, f := range m.Files {
		p := catalog.SetFilePath(dir, f.Source)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && (f.Size <= 0 || st.Size() == f.Size) {
			ms.have += st.Size()
			continue
		}
		ms.present = false
		var part int64
		if st, err := os.Stat(p + catalog.PartSuffix); err == nil {
			part = st.Size()
		}
		ms.have += part
		if f.Size <= 0 {
			known = false // ClaimSet asks the origin; the claim is checked then
		}
		ms.need += max(0, f.Size-part)
	}
	if !known {
		ms.need = 0
	}
	return ms
}

// measureHub: every listed file in the commit's snapshot with its size and
// the refs naming the commit is the model present, as the fast path
// judges it; a file whose blob is there already costs nothing to link.
func measureHub(cfg Config, h catalog.Hub) pfMeasure {
	hf := cfg.HFCacheDir()
	if !sameFilesystem(existingAncestor(hf), existingAncestor(cfg.CacheDir)) {
		return pfMeasure{why: "the Hugging Face cache (hf_cache " + hf + ") is on another filesystem than the cache: a prefetch keeps to the cache's budget, which does not reach there; the job's Prolog fetches it"}
	}
	ms := pfMeasure{present: true}
	stage := filepath.Join(cfg.CacheDir, catalog.HubStagingDir, catalog.RepoFolder(h.Repo))
	for _, f := range h.Files {
		if st, err := os.Stat(catalog.HubFilePath(hf, h.Repo, h.Commit, f.Path)); err == nil && st.Mode().IsRegular() && st.Size() == f.Size {
			ms.have += f.Size
			continue
		}
		ms.present = false
		if st, err := os.Stat(catalog.HubBlobPath(hf, h.Repo, f.BlobName())); err == nil && st.Mode().IsRegular() && st.Size() == f.Size {
			ms.have += f.Size
			continue
		}
		var part int64
		if st, err := os.Stat(filepath.Join(stage, f.BlobName()+catalog.PartSuffix)); err == nil {
			part = min(st.Size(), f.Size)
		}
		ms.have += part
		ms.need += f.Size - part
	}
	for _, ref := range catalog.HubRefs(h) {
		if got, err := catalog.ReadHubRef(catalog.HubRefPath(hf, h.Repo, ref)); err != nil || got != h.Commit {
			ms.present = false
		}
	}
	return ms
}

// existingAncestor is p, or the nearest directory above it that exists:
// a Hugging Face cache not made yet is on the filesystem of its parent.
func existingAncestor(p string) string {
	for {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		up := filepath.Dir(p)
		if up == p {
			return p
		}
		p = up
	}
}

// ensure fetches it's model through the agent's ensure, as a prefetch.
func (p *prefetcher) ensure(ctx context.Context, it *pfItem) error {
	m := it.model
	switch {
	case m != nil && m.IsHub():
		_, err := p.a.ensureAs(ctx, api.EnsureRequest{Source: m.Source, Hub: m.Hub}, nil, forPrefetch)
		return err
	case m != nil && m.IsSet():
		return p.ensureSet(ctx, it, *m)
	}
	_, err := p.a.ensureAs(ctx, api.EnsureRequest{Source: it.ask.Source, SHA256: it.ask.SHA256, Size: it.ask.Size}, nil, forPrefetch)
	return err
}

// ensureSet is the Prolog's ensureSet as a prefetch: the manifest first
// (so a set fetched in part is never counted held), then each file into
// the set directory, verified against its own digest or pin. Pinning a
// file that has neither is left to the job's Prolog, which reports it.
func (p *prefetcher) ensureSet(ctx context.Context, it *pfItem, m catalog.Model) error {
	cfg := p.a.Config()
	if err := catalog.WriteManifest(cfg.CacheDir, m); err != nil {
		return err
	}
	set := catalog.SetName(m)
	var base int64
	for _, f := range m.Files {
		p.mu.Lock()
		it.current, it.done = f.Source, base
		p.mu.Unlock()
		path, err := p.a.ensureAs(ctx, api.EnsureRequest{Source: f.Source, SHA256: f.WantSHA256(), Size: f.Size, Set: set}, nil, forPrefetch)
		if err != nil {
			return err
		}
		if st, err := os.Stat(path); err == nil {
			base += st.Size()
		}
	}
	p.mu.Lock()
	it.current, it.done = it.ask.Source, base
	p.mu.Unlock()
	return nil
}
