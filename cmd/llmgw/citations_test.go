package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The tree's top-level folders: a word that starts with one of them and a
// slash, in a comment, is a citation of a path in the repository.
var citedPath = regexp.MustCompile(`(^|[\s(` + "`" + `'",;:])((?:docs|slurm|cmd|coordinator|agent|weights|placement|prolog|scripts|packaging|internal|api)/[A-Za-z0-9_.+/-]*[A-Za-z0-9_/])`)

// A top-level document cited by its bare name, such as README.md.
var citedDoc = regexp.MustCompile(`(^|[\s(` + "`" + `'",;:])([A-Z][A-Z_]+\.md)\b`)

// A document cited by a bare name and a section, which no reader can follow.
var citedBySection = regexp.MustCompile(`\b([A-Z]{3,}) §[0-9]`)

// goIdent is what follows a package path when a comment names a Go
// identifier in it (weights/catalog.ValidModelName).
var goIdent = regexp.MustCompile(`\.[A-Za-z_][A-Za-z0-9_]*$`)

// TestCommentsCitePathsThatExist keeps the tree's comments honest: every
// repository path a comment names (docs/slurm/behaviour.md §2,
// slurm/prefer.go) must exist, so that a reader who follows a citation finds
// the page, and a document moved or never added is noticed here, not by the
// reader. Comments are the lines a Go, C, Lua or shell file marks as such.
func TestCommentsCitePathsThatExist(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		marks := commentMarks(path)
		if marks == nil {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		inBlock := false
		for i, line := range strings.Split(string(b), "\n") {
			text, ok := commentText(line, marks)
			// Lua's block comments (--[[ ... ]]): every line is prose.
			if marks[0] == "--" {
				if strings.HasPrefix(strings.TrimSpace(line), "--[[") {
					inBlock = true
				}
				if inBlock {
					text, ok = line, true
					inBlock = !strings.Contains(line, "]]")
				}
			}
			if !ok {
				continue
			}
			for _, m := range citedPath.FindAllStringSubmatch(text, -1) {
				checked++
				// Markdown links are relative to the page.
				if !citationExists(root, m[2]) && (marks[0] != "" || !citationExists(filepath.Dir(path), m[2])) {
					t.Errorf("%s:%d: the comment cites %s, which is not in the repository: cite a path that exists (docs/ holds the design and Slurm's behaviour)", rel, i+1, m[2])
				}
			}
			for _, m := range citedDoc.FindAllStringSubmatch(text, -1) {
				checked++
				if _, err := os.Stat(filepath.Join(root, m[2])); err != nil {
					t.Errorf("%s:%d: the comment cites %s, which is not in the repository: cite a path under docs/", rel, i+1, m[2])
				}
			}
			for _, m := range citedBySection.FindAllStringSubmatch(text, -1) {
				t.Errorf("%s:%d: the comment cites %s by name: cite its path in the repository (docs/...)", rel, i+1, m[0])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Errorf("checked only %d citations; the scan lost its way", checked)
	}
}

// slurmHeader is a header of Slurm's own, named as C includes it
// (slurm/spank.h), not a path of this tree.
var slurmHeader = regexp.MustCompile(`^slurm/[a-z_]+\.h$`)

// placeholder is a path segment that stands for many (slurm/testdata/RELEASE).
var placeholder = regexp.MustCompile(`(^|/)[A-Z][A-Z_]+(/|$)`)

// citationExists takes a cited path as it stands, then without a trailing
// sentence dot, then without a Go identifier after a package path. A
// Slurm header or a path with a placeholder in it is not a citation.
func citationExists(root, p string) bool {
	if slurmHeader.MatchString(p) || placeholder.MatchString(p) {
		return true
	}
	for {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err == nil {
			return true
		}
		q := strings.TrimSuffix(p, ".")
		if q == p {
			q = goIdent.ReplaceAllString(p, "")
		}
		if q == p {
			return false
		}
		p = q
	}
}

// commentMarks says how a file marks its comments, or nil for a file whose
// comments are not checked.
func commentMarks(path string) []string {
	switch filepath.Ext(path) {
	case ".go", ".c", ".h":
		return []string{"//", "/*", "*"}
	case ".lua":
		return []string{"--"}
	case ".md":
		// Markdown is prose throughout.
		return []string{""}
	case ".sh", ".toml", ".yaml", ".snippet", ".conf":
		return []string{"#"}
	case "":
		// The tree's extensionless scripts (scripts/dev-cluster, the hook
		// wrappers).
		if b, err := os.ReadFile(path); err == nil && strings.HasPrefix(string(b), "#!") {
			return []string{"#"}
		}
	}
	return nil
}

// commentText returns the comment part of a line: the whole line when it
// starts with a comment mark, the text after " // " or " # " otherwise.
func commentText(line string, marks []string) (string, bool) {
	trimmed := strings.TrimSpace(line)
	for _, m := range marks {
		if strings.HasPrefix(trimmed, m) {
			return trimmed, true
		}
	}
	for _, m := range marks {
		if m == "*" {
			continue
		}
		if i := strings.Index(line, " "+m+" "); i >= 0 {
			return line[i:], true
		}
	}
	return "", false
}
