package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/agent"
	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

const fetchAbout = `Makes SOURCE or MODEL present on this node and prints its local path on stdout.

SOURCE is hf:org/repo/file (hf:org/repo@revision/file to pin a revision) or an
http(s):// URL, fetched into the cache directory under a name derived from the
source; a /path is only checked, and a bare model id (org/name) is printed
unchanged for the engine to resolve.

MODEL is a catalog name (no slash): resolved at the coordinator (--coordinator
or LLMGW_COORDINATOR), else in the agent's catalog copy (--state-dir), and
fetched as a job's Prolog would: verified against its declared or pinned
sha256, a model of several files into its set directory, whole, a Hub
repository into the Hugging Face cache (--hf-cache, by default the agent's:
hub inside the cache directory) in huggingface_hub's own layout, at the
catalog's commit. The path printed is the one a job gets as
LLMGW_MODEL_PATH (a Hub model's: its snapshot). A name that is no catalog
entry is an error.

The file is fetched over --connections connections when the origin serves
ranges, resumed after an interruption without splicing versions, checked
against --sha256 (and the hub's published digest for hf: sources), and
renamed into place only once complete. Another fetch of the same file on this
node waits for the first. Progress goes to stderr. HF_ENDPOINT, HF_TOKEN and
HF_TOKEN_PATH are honoured for hf: sources; the token is sent to the hub
only, never to a host, port or scheme it redirects to. A fetch that the
disk cannot hold, counting the fetches already running on this node, is
refused before it starts; one that runs out of space removes its partial
file. The cache directory can also be set with LLMGW_CACHE_DIR.`

// fetchCmd wires flags into a fetch.Fetcher and prints the path.
func fetchCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "fetch", lookup("fetch").synopsis, fetchAbout)
	// The agent's cache, so that what an operator fetches by hand is what
	// the agent scans and reports.
	cacheDir := fs.String("cache-dir", agent.DefaultCacheDir, "where remote sources are fetched to")
	hfCache := fs.String("hf-cache", "", "the Hugging Face cache a Hub model is fetched into (agent.toml's hf_cache; default: hub inside --cache-dir, as the agent's)")
	sum := fs.String("sha256", "", "expected sha256 of the file, hex; a mismatch deletes the download")
	conns := fs.Int("connections", fetch.DefaultConnections, "connections per fetch when the origin serves ranges")
	lockDir := fs.String("lock-dir", "", "node-local directory for the one-fetch-per-node locks (default "+fetch.DefaultLockDir+", or a per-user directory under $TMPDIR when that is not writable)")
	url, tokenFile := coordFlags(fs)
	stateDir := fs.String("state-dir", agent.DefaultStateDir, "the agent's state directory, whose catalog copy resolves MODEL when no coordinator is given or answers")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return usagef("Try: llmgw fetch hf:org/repo/model.gguf", "fetch needs a SOURCE")
	case fs.NArg() > 1:
		return usagef("Give one SOURCE per call", "fetch takes one SOURCE, got %d arguments", fs.NArg())
	case *conns < 1:
		return usagef("Use --connections 1 for a single stream", "--connections must be at least 1, got %d", *conns)
	case *sum != "" && !catalog.ValidSHA256(*sum):
		return usagef("Give the 64 hex digits sha256sum prints", "--sha256 %q is not a sha256", *sum)
	case *cacheDir == "":
		// filepath.Abs would make it the working directory: a download
		// left wherever the command happened to run.
		return usagef("Give the directory to fetch into, e.g. --cache-dir "+agent.DefaultCacheDir+" (the agent's, and the default)", "--cache-dir is empty")
	}
	dir := *cacheDir
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}

	log := logrus.New()
	log.SetOutput(e.stderr)
	log.SetLevel(logrus.WarnLevel)
	p := &progressPrinter{w: e.stderr, tty: e.isTerminal(e.stderr), start: time.Now()}
	interval := 10 * time.Second
	if p.tty {
		interval = 200 * time.Millisecond
	}
	f := &fetch.Fetcher{
		CacheDir:         dir,
		LockDir:          *lockDir,
		Connections:      *conns,
		OnProgress:       p.print,
		ProgressInterval: interval,
		Log:              log,
	}
	var path string
	var err error
	if name := fs.Arg(0); catalogName(name) {
		if *sum != "" {
			p.end()
			return usagef("The catalog entry's own sha256 (declared or pinned) is checked", "--sha256 is for a SOURCE, not the catalog model %s", name)
		}
		var m catalog.Model
		if m, err = resolveModel(ctx, e, name, *url, *tokenFile, *stateDir); err != nil {
			return err
		}
		path, err = ensureModel(ctx, f, catalog.HFCacheDir(dir, *hfCache), m)
	} else {
		path, err = f.Ensure(ctx, fs.Arg(0), fetch.Want{SHA256: *sum})
	}
	p.end()
	if err != nil && ctx.Err() != nil && catalog.KindOf(fs.Arg(0)) == catalog.KindRemote {
		return fmt.Errorf("%w; the bytes fetched so far are kept, and the same command resumes them", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, path)
	return nil
}

// catalogName says whether arg names a catalog entry rather than a
// source: no slash (a path, a URL, an hf: source and an engine's org/name
// model id all have one) and a valid model name.
func catalogName(arg string) bool {
	return !strings.Contains(arg, "/") && !strings.Contains(arg, ":") && catalog.ValidModelName(arg) == nil
}

// resolveModel finds the catalog entry name: at the coordinator when one
// is given and answers, else in the agent's catalog copy.
func resolveModel(ctx context.Context, e *env, name, url, tokenFile, stateDir string) (catalog.Model, error) {
	var why []string
	if url != "" {
		c, err := coordClient(e, url, tokenFile)
		if err != nil {
			return catalog.Model{}, err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cat, err := c.Catalog(cctx)
		cancel()
		if err == nil {
			for _, m := range cat.Models {
				if m.Name == name {
					return m, nil
				}
			}
			return catalog.Model{}, fmt.Errorf("%s is not a catalog entry at %s ('llmgw models list' shows them); a source needs a slash: /path, hf:org/repo/file, https://..., or org/name for the engine to resolve", name, url)
		}
		why = append(why, fmt.Sprintf("the coordinator %s did not answer (%v)", url, err))
	}
	copyPath := filepath.Join(stateDir, nodeconf.CatalogFile)
	cp, err := catalog.ReadCopy(catalog.PrivateCopyPath(copyPath))
	if err != nil {
		cp, err = catalog.ReadCopy(copyPath)
	}
	if err != nil {
		why = append(why, fmt.Sprintf("the agent's catalog copy cannot be read (%v)", err))
		return catalog.Model{}, fmt.Errorf("%s cannot be resolved as a catalog name: %s; give --coordinator URL (or LLMGW_COORDINATOR), or a source with a slash", name, strings.Join(why, "; "))
	}
	m, ok := cp.Lookup(name)
	if !ok {
		return catalog.Model{}, fmt.Errorf("%s is not a catalog entry in the agent's catalog copy %s (from %s at %s); a source needs a slash: /path, hf:org/repo/file, https://..., or org/name for the engine to resolve",
			name, copyPath, cp.Coordinator, cp.Fetched.Format(time.RFC3339))
	}
	return m, nil
}

// ensureModel makes the catalog entry m present as a Prolog would and
// returns the path a job gets: each file verified against its declared or
// pinned sha256, a model of several files into its set directory, its
// manifest first, claimed whole, a Hub model into the Hugging Face cache
// hfCache at its commit.
func ensureModel(ctx context.Context, f *fetch.Fetcher, hfCache string, m catalog.Model) (string, error) {
	if m.IsHub() {
		if _, err := f.EnsureHub(ctx, hfCache, *m.Hub); err != nil {
			return "", fmt.Errorf("model %s: %w", m.Name, err)
		}
		return catalog.HubPath(hfCache, *m.Hub), nil
	}
	if !m.IsSet() {
		return f.Ensure(ctx, m.Source, fetch.Want{SHA256: m.WantSHA256(), Size: m.Size})
	}
	if err := catalog.WriteManifest(f.CacheDir, m); err != nil {
		return "", fmt.Errorf("set directory of model %s: %w", m.Name, err)
	}
	set := catalog.SetName(m)
	for i, file := range m.Files {
		if _, err := f.EnsureIn(ctx, set, file.Source, fetch.Want{SHA256: file.WantSHA256(), Size: file.Size}); err != nil {
			return "", fmt.Errorf("model %s, file %d of %d (%s): %w", m.Name, i+1, len(m.Files), catalog.FileName(file.Source), err)
		}
	}
	return catalog.SetPath(f.CacheDir, m), nil
}

// progressPrinter shows a fetch's progress: a bar redrawn in place on a
// terminal, a plain line now and then otherwise (a log file or a job's
// output, where a carriage return makes a mess).
type progressPrinter struct {
	w     io.Writer
	tty   bool
	start time.Time
	drawn bool

	lastAt   time.Time
	lastDone int64
}

func (p *progressPrinter) print(pr fetch.Progress) {
	now := time.Now()
	// The rate since the last report; the first measures from the start
	// (so bytes kept from an earlier attempt inflate it once).
	if p.lastAt.IsZero() {
		p.lastAt = p.start
	}
	rate := 0.0
	if dt := now.Sub(p.lastAt).Seconds(); dt > 0 {
		rate = float64(pr.Done-p.lastDone) / dt
	}
	p.lastAt, p.lastDone = now, pr.Done
	amount := catalog.FormatBytes(pr.Done)
	if pr.Total >= 0 {
		amount += " of " + catalog.FormatBytes(pr.Total)
	}
	if !p.tty {
		if pr.Done == 0 {
			return // nothing to say yet, or a failure the error will explain
		}
		line := "fetch " + pr.Source + ": " + amount
		if pct := pr.Percent(); pct >= 0 {
			line += fmt.Sprintf(" (%d%%)", pct)
		}
		fmt.Fprintf(p.w, "%s, %s/s\n", line, catalog.FormatBytes(int64(rate)))
		return
	}
	const width = 30
	bar := strings.Repeat("?", width)
	pct := pr.Percent()
	if pct >= 0 {
		n := min(width*pct/100, width)
		bar = strings.Repeat("=", n) + strings.Repeat(" ", width-n)
	}
	pctText := "  ?%"
	if pct >= 0 {
		pctText = fmt.Sprintf("%3d%%", pct)
	}
	fmt.Fprintf(p.w, "\r[%s] %s %s  %s/s\033[K", bar, pctText, amount, catalog.FormatBytes(int64(rate)))
	p.drawn = true
}

// end leaves the terminal on a fresh line after the bar.
func (p *progressPrinter) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
