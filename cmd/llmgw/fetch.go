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
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/fetch"
)

const fetchAbout = `Makes SOURCE present on this node and prints its local path on stdout.

SOURCE is hf:org/repo/file (hf:org/repo@revision/file to pin a revision) or an
http(s):// URL, fetched into the cache directory under a name derived from the
source; a /path is only checked, and a bare model id (org/name) is printed
unchanged for the engine to resolve.

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
	sum := fs.String("sha256", "", "expected sha256 of the file, hex; a mismatch deletes the download")
	conns := fs.Int("connections", fetch.DefaultConnections, "connections per fetch when the origin serves ranges")
	lockDir := fs.String("lock-dir", "", "node-local directory for the one-fetch-per-node locks (default "+fetch.DefaultLockDir+", or a per-user directory under $TMPDIR when that is not writable)")
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
	path, err := f.Ensure(ctx, fs.Arg(0), fetch.Want{SHA256: *sum})
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
