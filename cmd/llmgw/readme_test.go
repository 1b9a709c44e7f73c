package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMECommands keeps the README from drifting: every llmgw command
// line in its code blocks is parsed by the real command (run with --help
// appended, which pflag reaches only after every flag before it parsed), every
// make target it names exists, every script it names is there and
// executable, and its slurm.conf lines are the shipped snippet's. What the
// commands do is tested where they are built; `make demo` and the package
// test run the rest for real.
func TestREADMECommands(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var llmgw, makes, scripts int
	for _, block := range codeBlocks(string(b)) {
		for _, line := range block {
			if strings.ContainsAny(line, "─│►▲▼→") {
				continue // the design's diagram, not a command
			}
			args := shellWords(line)
			if len(args) == 0 {
				continue
			}
			switch {
			case args[0] == "llmgw":
				llmgw++
				check := append(args[1:], "--help")
				if len(args) > 1 && args[1] == "sbatch" {
					// Everything after llmgw's own --model is sbatch's,
					// script and its arguments included: sbatch parses it.
					check = []string{"sbatch", "--help"}
					if !strings.Contains(line, "--model ") {
						t.Errorf("README: %q: llmgw sbatch needs --model", line)
					}
				}
				code, _, stderr := llmgwRun(t, nil, check...)
				if code != 0 {
					t.Errorf("README: %q does not parse (exit %d): %s", line, code, stderr)
				}
			case args[0] == "make":
				makes++
				for _, target := range args[1:] {
					if name, _, ok := strings.Cut(target, "="); ok {
						// A variable for make (SLURM=PREFIX): the Makefile must read it.
						if !regexp.MustCompile(`\$\(` + regexp.QuoteMeta(name) + `\)`).Match(makefile) {
							t.Errorf("README: %q: the Makefile never reads %s", line, name)
						}
						continue
					}
					if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(makefile) {
						t.Errorf("README: %q: the Makefile has no target %s", line, target)
					}
				}
			case strings.HasPrefix(args[0], "scripts/"):
				scripts++
				if fi, err := os.Stat("../../" + args[0]); err != nil || fi.Mode()&0o111 == 0 {
					t.Errorf("README: %q: %s is not an executable in the tree (%v)", line, args[0], err)
				}
			}
		}
	}
	if llmgw < 10 || makes < 2 || scripts < 5 {
		t.Errorf("README: found %d llmgw, %d make and %d script lines; the parser lost its way", llmgw, makes, scripts)
	}

	snippet, err := os.ReadFile("../../packaging/slurm.conf.snippet")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(snippet), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.Contains(string(b), "\n"+line+"\n") {
			t.Errorf("README: the slurm.conf snippet's line %q is not in the README", line)
		}
	}
}

// codeBlocks returns the lines of every ``` block in markdown, with
// continuation lines (ending in \) joined.
func codeBlocks(md string) [][]string {
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			if in {
				blocks = append(blocks, cur)
				cur = nil
			}
			in = !in
			continue
		}
		if !in {
			continue
		}
		if n := len(cur); n > 0 && strings.HasSuffix(cur[n-1], "\\") {
			cur[n-1] = strings.TrimSuffix(cur[n-1], "\\") + " " + strings.TrimSpace(line)
			continue
		}
		cur = append(cur, line)
	}
	return blocks
}

// shellWords splits a command line as sh would for the README's simple
// lines: words, single and double quotes, and a trailing # comment.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	quote := rune(0)
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return words
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
