package hub

import (
	"context"
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/weights/catalog"
)

// What `llmgw models add` and `models repin` resolve: a repository at one
// commit, with the files a model takes from it (Select), as a catalog
// entry's Hub. The revision is resolved once, the listing is of that
// commit, and the index that names the shards is read at that commit: a
// branch that moves meanwhile cannot mix two commits into one model.

// Model resolves rev of repo (default main) and selects the files a model
// takes: the default selection with include added and exclude taken away.
func (c *Client) Model(ctx context.Context, repo, rev string, include, exclude []string) (catalog.Hub, Selection, error) {
	r, err := c.Resolve(ctx, repo, rev)
	if err != nil {
		return catalog.Hub{}, Selection{}, err
	}
	sel, err := Select(ctx, r, include, exclude, c.indexReader(r))
	if err != nil {
		return catalog.Hub{}, sel, err
	}
	h := hubOf(r, sel)
	h.Include, h.Exclude = include, exclude
	return h, sel, catalog.CheckHub(h)
}

// Listed resolves a model whose files were named one by one, as hf:
// sources: one repository, at one commit, the first file's (its revision,
// default main). A file that names another repository, or a revision that
// stands for another commit, fails the whole model and nothing is
// registered: files of two commits are not one model.
func (c *Client) Listed(ctx context.Context, sources []string) (catalog.Hub, Selection, error) {
	refs := make([]catalog.HFRef, len(sources))
	for i, s := range sources {
		ref, err := catalog.ParseHF(s)
		if err != nil {
			return catalog.Hub{}, Selection{}, err
		}
		if ref.Path == "" {
			return catalog.Hub{}, Selection{}, fmt.Errorf("%s names a repository; with several sources each names one file of it (hf:ORG/NAME/FILE), or give the repository alone", s)
		}
		if ref.Revision == "" {
			ref.Revision = "main"
		}
		if i > 0 && !equalRepo(ref.Repo, refs[0].Repo) {
			return catalog.Hub{}, Selection{}, fmt.Errorf("%s is in repository %s, %s in %s: a model's files come from one repository at one commit; nothing was registered", sources[0], refs[0].Repo, s, ref.Repo)
		}
		refs[i] = ref
	}
	r, err := c.Resolve(ctx, refs[0].Repo, refs[0].Revision)
	if err != nil {
		return catalog.Hub{}, Selection{}, err
	}
	commits := map[string]string{refs[0].Revision: r.Commit, r.Commit: r.Commit}
	paths := make([]string, len(refs))
	for i, ref := range refs {
		commit, ok := commits[ref.Revision]
		if !ok {
			other, err := c.Resolve(ctx, ref.Repo, ref.Revision)
			if err != nil {
				return catalog.Hub{}, Selection{}, err
			}
			commit = other.Commit
			commits[ref.Revision] = commit
		}
		if commit != r.Commit {
			return catalog.Hub{}, Selection{}, fmt.Errorf("%s is at commit %s (revision %s), but %s is at commit %s (revision %s): a model's files come from one commit, and these disagree; nothing was registered",
				sources[i], commit, ref.Revision, sources[0], r.Commit, refs[0].Revision)
		}
		paths[i] = ref.Path
	}
	sel, err := SelectPaths(r, paths)
	if err != nil {
		return catalog.Hub{}, sel, err
	}
	h := hubOf(r, sel)
	h.Listed = true
	return h, sel, catalog.CheckHub(h)
}

// Repin resolves h's revision again and selects by h's rules at the commit
// it stands for now: the files named, for a listed model; else the default
// with h's globs. An unchanged commit gives h back, files and all.
func (c *Client) Repin(ctx context.Context, h catalog.Hub) (catalog.Hub, Selection, error) {
	if !h.Listed {
		return c.Model(ctx, h.Repo, h.Revision, h.Include, h.Exclude)
	}
	r, err := c.Resolve(ctx, h.Repo, h.Revision)
	if err != nil {
		return catalog.Hub{}, Selection{}, err
	}
	paths := make([]string, len(h.Files))
	for i, f := range h.Files {
		paths[i] = f.Path
	}
	sel, err := SelectPaths(r, paths)
	if err != nil {
		return catalog.Hub{}, sel, err
	}
	n := hubOf(r, sel)
	n.Listed = true
	return n, sel, catalog.CheckHub(n)
}

func (c *Client) indexReader(r Revision) func(context.Context, File) ([]byte, error) {
	return func(ctx context.Context, f File) ([]byte, error) {
		return c.ReadFile(ctx, r.Repo, r.Commit, f, maxIndexBytes)
	}
}

func hubOf(r Revision, sel Selection) catalog.Hub {
	h := catalog.Hub{Repo: r.Repo, Revision: r.Revision, Commit: r.Commit, Files: make([]catalog.HubFile, len(sel.Files))}
	for i, f := range sel.Files {
		h.Files[i] = f.Hub()
	}
	return h
}

// equalRepo compares repository ids as the Hub does: without regard to case.
func equalRepo(a, b string) bool { return strings.EqualFold(a, b) }
