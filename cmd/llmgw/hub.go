package main

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"text/tabwriter"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/hub"
)

// hubRequest is a `models add` of a Hugging Face repository: the repository
// at a revision with globs, or files named one by one.
type hubRequest struct {
	repo, rev        string
	include, exclude []string
	files            []string // hf: sources of the files named, when listed
}

// hubToAdd reads the sources of `models add` as a Hub model, or returns
// nil when they are not one: a single source hf:ORG/REPO[@REV], or two or
// more hf: files (one file alone stays a model of one fetched file, as
// it always was).
func hubToAdd(sources, include, exclude, sums []string) (*hubRequest, error) {
	globs := len(include)+len(exclude) > 0
	hf := 0
	for _, s := range sources {
		if strings.HasPrefix(s, "hf:") {
			hf++
		}
	}
	if len(sources) == 1 && hf == 1 {
		ref, err := catalog.ParseHF(sources[0])
		if err != nil {
			return nil, usagef("", "%v", err)
		}
		if ref.Path == "" {
			if len(sums) > 0 {
				return nil, usagef("Leave out --sha256: each file is checked against the digest the Hub publishes", "--sha256 does not apply to a repository")
			}
			return &hubRequest{repo: ref.Repo, rev: ref.Revision, include: include, exclude: exclude}, nil
		}
	}
	if globs {
		return nil, usagef("Give the repository as hf:ORG/REPO[@REV]", "--include and --exclude select files of a repository (hf:ORG/REPO), not of %s", strings.Join(sources, " "))
	}
	if len(sources) < 2 || hf == 0 {
		return nil, nil
	}
	if hf != len(sources) {
		return nil, usagef("Register the hf: files as a model and the others as another",
			"the hf: files of a model are one repository at one commit, which a file from elsewhere cannot join")
	}
	if len(sums) > 0 {
		return nil, usagef("Leave out --sha256: each file is checked against the digest the Hub publishes", "--sha256 does not apply to hf: files of a repository")
	}
	return &hubRequest{files: sources}, nil
}

// hubClient is the Hub as the admin's environment names it, as
// huggingface-cli does: HF_ENDPOINT, HF_TOKEN (or the file login writes).
func hubClient(e *env) *hub.Client {
	return &hub.Client{Endpoint: e.getenv("HF_ENDPOINT"), Token: hub.TokenFromEnv(e.getenv), UserAgent: "llmgw/" + version,
		Waiting: func(msg string) { fmt.Fprintln(e.stderr, "llmgw models: "+msg) }}
}

// addHub resolves the repository, registers the model as that commit's
// selection and prints it.
func addHub(ctx context.Context, e *env, c *api.Client, m api.Model, req hubRequest) error {
	hc := hubClient(e)
	var h catalog.Hub
	var sel hub.Selection
	var err error
	if req.files != nil {
		h, sel, err = hc.Listed(ctx, req.files)
	} else {
		h, sel, err = hc.Model(ctx, req.repo, req.rev, req.include, req.exclude)
	}
	if err != nil {
		return fmt.Errorf("model %s: %w; nothing was registered", m.Name, err)
	}
	m.Hub = &h
	m.Source = catalog.HubSource(h.Repo, h.Commit)
	got, err := c.PutModel(ctx, m)
	if err != nil {
		return olderCoordinator(c, err)
	}
	printHub(e, got, sel, "")
	return nil
}

// olderCoordinator says what a coordinator older than Hub models means by
// refusing the entry: it decodes strictly, and knows no hub field.
func olderCoordinator(c *api.Client, err error) error {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == api.CodeInvalid && strings.Contains(ae.Message, `unknown field "hub"`) {
		return fmt.Errorf("the coordinator at %s is older than Hugging Face repository models and refused the entry; upgrade it first, then add the model again (%w)", c.BaseURL, err)
	}
	return err
}

// repinHub resolves the revision of the Hub model m again and, when it
// stands for another commit now, makes that commit the model's revision.
func repinHub(ctx context.Context, e *env, c *api.Client, m api.Model) error {
	old := *m.Hub
	h, sel, err := hubClient(e).Repin(ctx, old)
	if err != nil {
		return fmt.Errorf("model %s: %w; the model stays at commit %s", m.Name, err, old.Commit)
	}
	if h.Commit == old.Commit && sameFiles(h.Files, old.Files) {
		fmt.Fprintf(e.stdout, "%s: %s is still at commit %s; nothing changed, and no node fetches anything\n", m.Name, revOf(old), old.Commit)
		return nil
	}
	m.Hub = &h
	m.Source = catalog.HubSource(h.Repo, h.Commit)
	m.Size = 0 // the new revision's
	got, err := c.PutModel(ctx, m)
	if err != nil {
		return olderCoordinator(c, err)
	}
	printHub(e, got, sel, old.Commit)
	changed := changedFiles(old.Files, h.Files)
	fmt.Fprintf(e.stdout, "%d of %d files changed since commit %s; a node fetches only those, into a new snapshot: jobs already running keep theirs\n",
		len(changed), len(h.Files), old.Commit)
	return nil
}

func revOf(h catalog.Hub) string { return "hf:" + h.Repo + "@" + h.Revision }

// printHub says what the model is now: the repository, the revision and
// its commit, and every file with its size, then how many were left out.
func printHub(e *env, m api.Model, sel hub.Selection, was string) {
	h := m.Hub
	verb := "at"
	if was != "" {
		verb = "moved from " + was + " to"
	}
	fmt.Fprintf(e.stdout, "%s -> hf:%s %s commit %s (revision %s): %d files, %s\n", m.Name, h.Repo, verb, h.Commit, h.Revision,
		len(h.Files), catalog.FormatBytes(catalog.HubSize(*h)))
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
	for _, f := range h.Files {
		fmt.Fprintf(tw, "  %s\t%s\n", f.Path, catalog.FormatBytes(f.Size))
	}
	tw.Flush()
	if n := len(sel.Left); n > 0 {
		var names []string
		for _, f := range sel.Left[:min(n, 4)] {
			names = append(names, f.Path)
		}
		more := ""
		if n > len(names) {
			more = fmt.Sprintf(", and %d more", n-len(names))
		}
		hint := "--include GLOB adds files"
		if h.Listed {
			hint = "name them to add them"
		}
		fmt.Fprintf(e.stdout, "not selected: %s (%s%s); %s\n", plural(n, "file", "files"), strings.Join(names, ", "), more, hint)
	}
}

func sameFiles(a, b []catalog.HubFile) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// changedFiles are the files of next whose blob was not in prev: what a
// node holding prev fetches.
func changedFiles(prev, next []catalog.HubFile) []string {
	have := map[string]bool{}
	for _, f := range prev {
		have[f.BlobName()] = true
	}
	var out []string
	for _, f := range next {
		if !have[f.BlobName()] {
			out = append(out, path.Clean(f.Path))
		}
	}
	return out
}
