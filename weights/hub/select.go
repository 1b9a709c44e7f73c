package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/llmgw/llmgw/weights/catalog"
)

// The default selection is what the engines load from a repository, and no
// more: a repository also holds the same weights in other formats
// (pytorch_model.bin beside model.safetensors, consolidated.safetensors
// beside the shards, original/ for Meta's own loader, GGUF quantisations),
// and a node that fetched them all would move two or three times the
// bytes. The rules:
//
//   - the weights: the shards model.safetensors.index.json names (read at
//     the commit and checked against the listing), else model.safetensors,
//     else every other .safetensors at the top; only when there is no
//     safetensors at all, the same for pytorch_model.bin and .bin, .pt,
//     .pth files;
//   - beside them, at the top: config.json, generation_config.json, the
//     tokenizer's files (tokenizer.json, tokenizer_config.json,
//     tokenizer.model, special_tokens_map.json, added_tokens.json,
//     vocab.json, vocab.txt, merges.txt, spiece.model, *.tiktoken), the chat
//     template (chat_template.jinja, chat_template.json,
//     additional_chat_templates/), a multimodal model's
//     preprocessor_config.json, processor_config.json and
//     video_preprocessor_config.json, and *.py: the code of a model that
//     needs trust_remote_code, without which it does not load offline;
//   - never original/**, never *.gguf: those only through --include.
//
// --include GLOB adds every file it matches to that, and --exclude GLOB
// takes away every file it matches, after --include. Globs match the
// whole path as huggingface_hub's allow_patterns do (fnmatch: '*' matches
// '/' too; a glob ending in '/' matches everything under it).

// configNames are the files at the top of a repository that the default
// selection takes beside the weights.
var configNames = map[string]bool{
	"config.json": true, "generation_config.json": true,
	"tokenizer.json": true, "tokenizer_config.json": true, "tokenizer.model": true,
	"special_tokens_map.json": true, "added_tokens.json": true,
	"vocab.json": true, "vocab.txt": true, "merges.txt": true,
	"spiece.model": true, "sentencepiece.bpe.model": true,
	"chat_template.jinja": true, "chat_template.json": true,
	"preprocessor_config.json": true, "processor_config.json": true, "video_preprocessor_config.json": true,
}

// maxIndexBytes bounds the index read to choose the shards.
const maxIndexBytes = 64 << 20

// Selection is which files of a revision a model takes, and which not.
type Selection struct {
	Files []File
	// Left are the files not taken, for `models add` to say so.
	Left []File
	// Index is the index the shards were taken from, "" when none.
	Index string
}

// Select chooses the files of rev a model takes: the default selection
// with include added and exclude taken away (see the comment above).
// readIndex reads a listed file, for the index that names the shards.
func Select(ctx context.Context, rev Revision, include, exclude []string, readIndex func(context.Context, File) ([]byte, error)) (Selection, error) {
	for _, g := range append(append([]string(nil), include...), exclude...) {
		if g == "" {
			return Selection{}, fmt.Errorf("an empty --include or --exclude glob matches nothing; give a glob such as '*.gguf'")
		}
	}
	byPath := make(map[string]File, len(rev.Files))
	for _, f := range rev.Files {
		byPath[f.Path] = f
	}
	take := map[string]bool{}
	var sel Selection

	weights, index, err := defaultWeights(ctx, rev, byPath, readIndex)
	if err != nil {
		return Selection{}, err
	}
	sel.Index = index
	for _, p := range weights {
		take[p] = true
	}
	for _, f := range rev.Files {
		if isConfigFile(f.Path) {
			take[f.Path] = true
		}
	}
	for _, f := range rev.Files {
		for _, g := range include {
			if Match(g, f.Path) {
				take[f.Path] = true
			}
		}
	}
	for _, f := range rev.Files {
		for _, g := range exclude {
			if Match(g, f.Path) {
				delete(take, f.Path)
			}
		}
	}
	for _, f := range rev.Files {
		if take[f.Path] {
			sel.Files = append(sel.Files, f)
		} else {
			sel.Left = append(sel.Left, f)
		}
	}
	sort.Slice(sel.Files, func(i, j int) bool { return sel.Files[i].Path < sel.Files[j].Path })
	sort.Slice(sel.Left, func(i, j int) bool { return sel.Left[i].Path < sel.Left[j].Path })
	if !hasWeights(sel.Files) {
		return sel, noWeights(rev, include)
	}
	return sel, nil
}

// SelectPaths takes exactly the files at paths: a model whose files were
// named one by one. A path the revision does not hold fails the whole
// selection, naming it.
func SelectPaths(rev Revision, paths []string) (Selection, error) {
	byPath := make(map[string]File, len(rev.Files))
	for _, f := range rev.Files {
		byPath[f.Path] = f
	}
	take := map[string]bool{}
	var sel Selection
	for _, p := range paths {
		f, ok := byPath[p]
		if !ok {
			return Selection{}, fmt.Errorf("%s holds no file %s at commit %s (revision %s)", rev.Repo, p, rev.Commit, rev.Revision)
		}
		if !take[p] {
			take[p] = true
			sel.Files = append(sel.Files, f)
		}
	}
	for _, f := range rev.Files {
		if !take[f.Path] {
			sel.Left = append(sel.Left, f)
		}
	}
	sort.Slice(sel.Files, func(i, j int) bool { return sel.Files[i].Path < sel.Files[j].Path })
	sort.Slice(sel.Left, func(i, j int) bool { return sel.Left[i].Path < sel.Left[j].Path })
	if !hasWeights(sel.Files) {
		return sel, fmt.Errorf("none of the files named is a weight file (.safetensors, .bin, .pt, .pth or .gguf); name one")
	}
	return sel, nil
}

// defaultWeights are the weight files the default selection takes, and
// the index they came from.
func defaultWeights(ctx context.Context, rev Revision, byPath map[string]File, readIndex func(context.Context, File) ([]byte, error)) ([]string, string, error) {
	for _, kind := range []struct{ index, single, ext string }{
		{"model.safetensors.index.json", "model.safetensors", ".safetensors"},
		{"pytorch_model.bin.index.json", "pytorch_model.bin", ".bin"},
	} {
		if f, ok := byPath[kind.index]; ok {
			shards, err := indexShards(ctx, rev, f, byPath, readIndex)
			if err != nil {
				return nil, "", err
			}
			return append(shards, kind.index), kind.index, nil
		}
		if _, ok := byPath[kind.single]; ok {
			return []string{kind.single}, "", nil
		}
		var top []string
		for _, f := range rev.Files {
			ext := strings.ToLower(path.Ext(f.Path))
			if !strings.Contains(f.Path, "/") && (ext == kind.ext || kind.ext == ".bin" && (ext == ".pt" || ext == ".pth")) {
				top = append(top, f.Path)
			}
		}
		if len(top) > 0 {
			return top, "", nil
		}
	}
	return nil, "", nil
}

// indexShards reads a sharded checkpoint's index and returns the shards it
// names, each of which the revision must hold.
func indexShards(ctx context.Context, rev Revision, f File, byPath map[string]File, readIndex func(context.Context, File) ([]byte, error)) ([]string, error) {
	b, err := readIndex(ctx, f)
	if err != nil {
		return nil, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s of %s at %s is not an index (weight_map of tensor to file): %w", f.Path, rev.Repo, rev.Commit, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s of %s at %s names no shards (empty weight_map)", f.Path, rev.Repo, rev.Commit)
	}
	dir := path.Dir(f.Path)
	seen := map[string]bool{}
	var shards []string
	for _, s := range idx.WeightMap {
		p := path.Join(dir, s)
		if catalog.CheckRepoPath(s) != nil || catalog.CheckRepoPath(p) != nil {
			return nil, fmt.Errorf("%s of %s at %s names shard %q, not a file of the repository", f.Path, rev.Repo, rev.Commit, s)
		}
		if seen[p] {
			continue
		}
		if _, ok := byPath[p]; !ok {
			return nil, fmt.Errorf("%s of %s at %s names shard %s, which the repository does not hold at that commit: no engine could load it", f.Path, rev.Repo, rev.Commit, p)
		}
		seen[p] = true
		shards = append(shards, p)
	}
	sort.Strings(shards)
	return shards, nil
}

// isConfigFile reports whether the default selection takes p beside the
// weights: see the comment at the top of this file.
func isConfigFile(p string) bool {
	if strings.HasPrefix(p, "additional_chat_templates/") && strings.HasSuffix(p, ".jinja") && strings.Count(p, "/") == 1 {
		return true
	}
	if strings.Contains(p, "/") {
		return false
	}
	return configNames[p] || strings.HasSuffix(p, ".tiktoken") || strings.HasSuffix(p, ".py")
}

func hasWeights(files []File) bool {
	for _, f := range files {
		if catalog.IsWeightName(path.Base(f.Path)) {
			return true
		}
	}
	return false
}

// noWeights says why a selection holds no weights, and which weight files
// the repository does have, so the admin can pick them with --include.
func noWeights(rev Revision, include []string) error {
	var found []string
	for _, f := range rev.Files {
		if catalog.IsWeightName(path.Base(f.Path)) {
			found = append(found, f.Path)
		}
	}
	msg := fmt.Sprintf("%s at %s (revision %s): no weight file is selected", rev.Repo, rev.Commit, rev.Revision)
	switch {
	case len(found) == 0:
		return fmt.Errorf("%s, and the repository holds none (.safetensors, .bin, .pt, .pth, .gguf)", msg)
	case len(include) > 0:
		msg += "; --include matched none of its weight files"
	default:
		msg += "; the default takes safetensors (or else .bin) at the top of the repository, and GGUF only when asked"
	}
	shown := found[:min(len(found), 5)]
	msg += fmt.Sprintf("; it holds %s", strings.Join(shown, ", "))
	if len(found) > len(shown) {
		msg += fmt.Sprintf(" and %d more", len(found)-len(shown))
	}
	return fmt.Errorf("%s: choose with --include GLOB, e.g. --include '%s'", msg, suggestGlob(found[0]))
}

// suggestGlob is a glob for the weights like p: its directory and extension.
func suggestGlob(p string) string {
	dir := path.Dir(p)
	g := "*" + path.Ext(p)
	if dir != "." {
		g = dir + "/" + g
	}
	return g
}

// Match reports whether the glob g matches the path p as Python's fnmatch
// does, which huggingface_hub's allow_patterns and ignore_patterns use:
// '*' matches any run of characters, '/' included; '?' one character;
// [seq] and [!seq] one character in or out of seq. A glob ending in '/'
// matches everything under that directory.
func Match(g, p string) bool {
	if strings.HasSuffix(g, "/") {
		g += "*"
	}
	return match(g, p)
}

func match(g, p string) bool {
	for len(g) > 0 {
		switch g[0] {
		case '*':
			for len(g) > 0 && g[0] == '*' {
				g = g[1:]
			}
			if g == "" {
				return true
			}
			for i := 0; i <= len(p); i++ {
				if match(g, p[i:]) {
					return true
				}
			}
			return false
		case '?':
			if p == "" {
				return false
			}
			_, n := firstRune(p)
			g, p = g[1:], p[n:]
		case '[':
			end := classEnd(g)
			if end < 0 {
				// An unclosed '[' is a literal, as in fnmatch.
				if p == "" || p[0] != '[' {
					return false
				}
				g, p = g[1:], p[1:]
				continue
			}
			if p == "" {
				return false
			}
			r, n := firstRune(p)
			if !inClass(g[1:end], r) {
				return false
			}
			g, p = g[end+1:], p[n:]
		default:
			if p == "" || g[0] != p[0] {
				return false
			}
			g, p = g[1:], p[1:]
		}
	}
	return p == ""
}

// classEnd is the index of the ']' closing the class g starts, or -1.
func classEnd(g string) int {
	i := 1
	if i < len(g) && g[i] == '!' {
		i++
	}
	if i < len(g) && g[i] == ']' {
		i++
	}
	for ; i < len(g); i++ {
		if g[i] == ']' {
			return i
		}
	}
	return -1
}

func inClass(class string, r rune) bool {
	neg := strings.HasPrefix(class, "!")
	if neg {
		class = class[1:]
	}
	in := false
	rs := []rune(class)
	for i := 0; i < len(rs); i++ {
		if i+2 < len(rs) && rs[i+1] == '-' {
			if rs[i] <= r && r <= rs[i+2] {
				in = true
			}
			i += 2
			continue
		}
		if rs[i] == r {
			in = true
		}
	}
	return in != neg
}

func firstRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }
