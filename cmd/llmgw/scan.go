package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/llmgw/llmgw/agent/nodeconf"
	"github.com/llmgw/llmgw/weights/catalog"
	"github.com/llmgw/llmgw/weights/scan"
)

// scanShownSkips is how many skipped entries per directory the table notes
// name before summarising; --json lists up to scan.DefaultMaxSkipped.
const scanShownSkips = 20

func scanCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "scan", "DIR... [--json] [--catalog FILE]", `
Lists the weights in each DIR exactly as this node's agent would report
them: each weight file (.gguf .safetensors .bin .pt .pth) or directory
holding one, its size, whether it is on a shared filesystem, and whether it
is complete. Hugging Face hub caches are listed per snapshot with their
model id. The table goes to stdout; notes on each directory (missing,
unreadable, not answering, entries skipped and why) go to stderr.

A snapshot of a Hugging Face repository registered as a model is judged by
the model's list of files, as the agent judges it: --catalog names the
node's catalog copy (default: the agent's, when it is there); --catalog ''
judges every snapshot by the rules for one without a list.

A DIR that does not exist is noted, not an error: the exit status is 0
whenever the scan ran.`)
	asJSON := fs.Bool("json", false, "print the inventory as JSON (the fields the agent reports)")
	timeout := fs.Duration("timeout", scan.DefaultDirTimeout, "give up on a DIR that has not answered after this long")
	defCopy := filepath.Join(nodeconf.DefaultStateDir, nodeconf.CatalogFile)
	copyPath := fs.String("catalog", defCopy, "the node's catalog copy, whose Hub models' file lists judge their snapshots")
	if err := parse(fs, args); err != nil {
		return err
	}
	var hubs map[string]catalog.Hub
	if *copyPath != "" {
		cp, err := catalog.ReadCopy(*copyPath)
		switch {
		case err == nil:
			hubs = scan.HubLists(cp.Models)
		case fs.Changed("catalog") || !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%w; --catalog '' scans without it", err)
		}
	}
	if fs.NArg() == 0 {
		return usagef("Name the directories to look in, e.g. 'llmgw scan /models ~/.cache/huggingface/hub'", "scan needs at least one DIR")
	}
	if *timeout <= 0 {
		return usagef("Give a positive duration, e.g. --timeout 30s", "--timeout must be positive, got %s", *timeout)
	}
	inv := scan.Scan(ctx, fs.Args(), scan.Options{DirTimeout: *timeout, Hub: hubs})
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(inv)
	}
	if len(inv.Weights) > 0 {
		if err := scanTable(e.stdout, inv.Weights); err != nil {
			return err
		}
	}
	scanNotes(e.stderr, inv)
	return nil
}

func scanTable(w io.Writer, ws []scan.Local) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tSIZE\tWHERE\tMODEL\tSTATE")
	for _, l := range ws {
		where := "local"
		if l.Shared {
			where = "shared"
		}
		model := "-"
		if l.ModelID != "" {
			model = l.ModelID
			if l.Revision != "" {
				model += "@" + scanShortRev(l.Revision)
			}
		}
		state := "complete"
		if !l.Complete {
			state = "incomplete: " + l.Problem
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", scanShowPath(l.Path), catalog.FormatBytes(l.Size), where, model, state)
	}
	return tw.Flush()
}

// scanNotes says, for each directory, what it was and what was passed over.
func scanNotes(w io.Writer, inv scan.Inventory) {
	if len(inv.Weights) == 0 {
		fmt.Fprintln(w, "no weights found")
	}
	for _, d := range inv.Dirs {
		p := scanShowPath(d.Path)
		switch {
		case d.Missing:
			fmt.Fprintf(w, "%s: not there (a mount that has not come back yet?); nothing from it counts\n", p)
			continue
		case d.Err != "" && d.FSType == "":
			fmt.Fprintf(w, "%s: %s\n", p, d.Err)
			continue
		}
		where := "local"
		if d.Shared {
			where = "shared"
		}
		n := 0
		for _, l := range inv.Weights {
			if strings.HasPrefix(l.Path, strings.TrimSuffix(d.Path, "/")+"/") {
				n++
			}
		}
		fmt.Fprintf(w, "%s: %s (%s), %d weights, %d skipped, %s\n", p, d.FSType, where, n, d.SkippedCount, d.Took.Round(time.Millisecond))
		if d.Err != "" {
			fmt.Fprintf(w, "  error: %s\n", d.Err)
		}
		for i, s := range d.Skipped {
			if i == scanShownSkips {
				break
			}
			fmt.Fprintf(w, "  skipped %s: %s\n", scanShowPath(s.Path), s.Reason)
		}
		if shown := min(len(d.Skipped), scanShownSkips); d.SkippedCount > shown {
			fmt.Fprintf(w, "  ... and %d more skipped (--json lists the first %d)\n", d.SkippedCount-shown, len(d.Skipped))
		}
	}
}

// scanShowPath quotes a path that would break a table line: newlines and
// other control characters, invalid UTF-8, leading or trailing spaces. Such
// names are legal and turn up; the JSON output carries them escaped.
func scanShowPath(p string) string {
	if !utf8.ValidString(p) || strings.TrimSpace(p) != p || strings.ContainsFunc(p, func(r rune) bool {
		return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)
	}) {
		return strconv.Quote(p)
	}
	return p
}

func scanShortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
