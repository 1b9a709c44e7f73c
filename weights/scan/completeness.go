package scan

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Completeness: when a candidate the walk found is finished, and how what
// is wrong with it is said. What counts as a weight file at all is
// catalog.IsWeightName. The name rules here do no I/O; readIndex and
// checkComplete read the index files and stat the shards they list.

// splitGGUF parses a split GGUF part name as llama.cpp's gguf-split
// writes it, "PREFIX-00001-of-00003.gguf". A split model loads from its
// first part and needs every other part beside it.
func splitGGUF(name string) (prefix string, part, total int, ok bool) {
	const suffix = ".gguf"
	if len(name) < len("-00001-of-00001")+len(suffix) || !strings.EqualFold(name[len(name)-len(suffix):], suffix) {
		return "", 0, 0, false
	}
	stem := name[:len(name)-len(suffix)]
	i := strings.LastIndex(stem, "-of-")
	if i < 6 || stem[i-6] != '-' {
		return "", 0, 0, false
	}
	ps, ts := stem[i-5:i], stem[i+4:]
	if len(ts) != 5 || !allDigits(ps) || !allDigits(ts) {
		return "", 0, 0, false
	}
	part, _ = strconv.Atoi(ps)
	total, _ = strconv.Atoi(ts)
	if part < 1 || total < 1 || part > total {
		return "", 0, 0, false
	}
	return stem[:i-6], part, total, true
}

// splitShard parses a shard name of a numbered set, whatever the weight
// format: "PREFIX-00001-of-00003.EXT" as gguf-split writes GGUF parts and
// transformers' save_pretrained writes safetensors and .bin shards. A set
// missing a number is a download that stopped between two files, index or
// no index (an HF snapshot gets its index last).
func splitShard(name string) (prefix string, part, total int, ext string, ok bool) {
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return "", 0, 0, "", false
	}
	ext = name[dot:]
	switch strings.ToLower(ext) {
	case ".gguf", ".safetensors", ".bin":
	default:
		return "", 0, 0, "", false
	}
	prefix, part, total, ok = splitGGUF(name[:dot] + ".gguf")
	return prefix, part, total, ext, ok
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// splitName is the name of one part of a split GGUF set.
func splitName(prefix string, part, total int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, part, total)
}

// isIndexName reports whether a file is a sharded checkpoint's index:
// model.safetensors.index.json, pytorch_model.bin.index.json, and the same
// with another stem (diffusers' diffusion_pytorch_model..., consolidated...).
// It lists every shard the checkpoint needs, which is the only way to tell
// a complete sharded download from one that stopped between two shards.
func isIndexName(name string) bool {
	lower := strings.ToLower(name)
	stem, ok := strings.CutSuffix(lower, ".index.json")
	return ok && (strings.HasSuffix(stem, ".safetensors") || strings.HasSuffix(stem, ".bin"))
}

// maxIndexBytes bounds how much of an index file is read. Real ones are
// tens to hundreds of kilobytes; anything past this is not an index.
const maxIndexBytes = 64 << 20

// readIndex returns the shard file names an index lists, sorted and
// de-duplicated, as paths relative to the index's directory.
func readIndex(p string) ([]string, error) {
	// O_NONBLOCK: a FIFO given an index's name must not stall the scan. The
	// caller has already seen a regular file here, but it can be replaced.
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	var idx struct {
		WeightMap map[string]any `json:"weight_map"`
	}
	if err := json.NewDecoder(io.LimitReader(f, maxIndexBytes)).Decode(&idx); err != nil {
		return nil, fmt.Errorf("not valid JSON (truncated?): %v", err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, errors.New("lists no shards (no weight_map)")
	}
	seen := map[string]bool{}
	var shards []string
	for tensor, v := range idx.WeightMap {
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("tensor %q maps to %v, not a file name", tensor, v)
		}
		if !seen[s] {
			seen[s] = true
			shards = append(shards, s)
		}
	}
	sort.Strings(shards)
	return shards, nil
}

// shardOutside reports whether a shard name from an index would leave
// the index's directory. Such an index is not trusted: the loader would
// read a file the operator did not put in the model.
func shardOutside(shard string) bool {
	if shard == "" || path.IsAbs(shard) {
		return true
	}
	c := path.Clean(shard)
	return c == ".." || strings.HasPrefix(c, "../")
}

// checkComplete decides whether a directory candidate is finished: no
// download still being written, every shard its indexes list present and
// non-empty, every part of each split GGUF, no empty weight file. Broken
// links and unreadable subdirectories were noted during the walk.
func (c *candidate) checkComplete() {
	sort.Strings(c.partials)
	if n := len(c.partials); n > 0 {
		msg := "a download is still being written (" + quoteName(c.partials[0])
		if n > 1 {
			msg += fmt.Sprintf(" and %d more", n-1)
		}
		c.trouble.add(msg + ")")
	}
	if len(c.weights) == 0 && c.broken == 0 {
		c.trouble.add("no finished weight file yet")
	}
	if c.manifest {
		c.checkSet()
	}
	if c.modelID != "" {
		c.checkHubConfigs()
	}
	sort.Strings(c.indexes)
	listed := map[string]bool{}
	for _, idx := range c.indexes {
		shards, err := readIndex(c.path + "/" + idx)
		if err != nil {
			c.trouble.add(fmt.Sprintf("index %s unusable: %s", quoteName(idx), errText(err)))
			continue
		}
		dir := path.Dir(idx)
		for _, sh := range shards {
			if shardOutside(sh) {
				c.trouble.add(fmt.Sprintf("index %s names a file outside the model: %s", quoteName(idx), quoteName(sh)))
				continue
			}
			r := path.Join(dir, sh)
			listed[r] = true
			size, ok := c.weights[r]
			if !ok {
				// A shard not named like a weight file was not recorded.
				st, err := os.Stat(c.path + "/" + r)
				if err != nil || !st.Mode().IsRegular() {
					c.trouble.file(r, "missing, listed in "+path.Base(idx))
					continue
				}
				size = st.Size()
			}
			if size == 0 {
				c.trouble.file(r, "empty")
			}
		}
	}
	names := make([]string, 0, len(c.weights))
	for r := range c.weights {
		names = append(names, r)
	}
	sort.Strings(names)
	type setKey struct {
		dir, prefix, ext string
		total            int
	}
	sets := map[setKey]map[int]bool{}
	for _, r := range names {
		if prefix, part, total, ext, ok := splitShard(path.Base(r)); ok {
			k := setKey{path.Dir(r), prefix, ext, total}
			if sets[k] == nil {
				sets[k] = map[int]bool{}
			}
			sets[k][part] = true
		}
		if c.weights[r] == 0 && !listed[r] {
			c.trouble.file(r, "empty")
		}
	}
	indexed := map[string]bool{}
	for _, idx := range c.indexes {
		indexed[path.Dir(idx)] = true
	}
	for k, parts := range sets {
		if indexed[k.dir] && !strings.EqualFold(k.ext, ".gguf") {
			// An index beside the shards lists them, and is the truth
			// (checked above): a checkpoint may name its shards otherwise.
			continue
		}
		for part := 1; part <= k.total; part++ {
			if parts[part] {
				continue
			}
			name := fmt.Sprintf("%s-%05d-of-%05d%s", k.prefix, part, k.total, k.ext)
			if strings.EqualFold(k.ext, ".gguf") {
				c.trouble.file(path.Join(k.dir, name), "missing part of a split GGUF")
			} else {
				c.trouble.file(path.Join(k.dir, name), "missing part of a sharded set")
			}
		}
	}
}

// checkSet holds a directory with a set manifest (catalog.SetManifest) to
// every file the manifest lists: a model of several files fetched by llmgw
// (weights/catalog/set.go) is whole only with all of them, and a fetch
// killed between two files leaves a directory that nothing else would tell
// from a finished one when the names carry no "-of-N" (a checkpoint and
// its config.json).
func (c *candidate) checkSet() {
	man, err := catalog.ReadManifest(c.path)
	if err != nil {
		c.trouble.add(fmt.Sprintf("set manifest %s unusable: %s", catalog.SetManifest, errText(err)))
		return
	}
	for _, f := range man.Files {
		size, ok := c.weights[f.Name]
		if !ok {
			st, err := os.Stat(c.path + "/" + f.Name)
			if err != nil || !st.Mode().IsRegular() {
				c.trouble.file(f.Name, "missing, one of the files of the set in "+catalog.SetManifest)
				continue
			}
			size = st.Size()
		}
		if f.Size > 0 && size != f.Size {
			c.trouble.file(f.Name, fmt.Sprintf("%d bytes, the set wants %d", size, f.Size))
		}
	}
}

// hubList judges a Hugging Face cache snapshot against the catalog's list
// of its commit's files, and by nothing else: every file of the list there
// (through its link) with its size, and no problem the walk found with
// one of them (a broken link, a weight file whose header says it is cut
// short); what else the snapshot holds, or lacks, or what another
// revision's download is still writing in blobs/, does not matter. A
// model is held when what it needs is there, whoever put it there.
func (c *candidate) hubList(h catalog.Hub) {
	var t trouble
	for _, f := range h.Files {
		if why, bad := c.problems[f.Path]; bad {
			t.file(f.Path, why)
			continue
		}
		size, ok := c.weights[f.Path]
		if !ok {
			st, err := os.Stat(c.path + "/" + f.Path)
			if err != nil || !st.Mode().IsRegular() {
				t.file(f.Path, "missing, one of the files of "+h.Repo+" at this commit in the catalog")
				continue
			}
			size = st.Size()
		}
		if size != f.Size {
			t.file(f.Path, fmt.Sprintf("%d bytes, the Hub lists %d", size, f.Size))
		}
	}
	if why := readOnlyRefs(c.path, h); why != "" {
		t.add(why)
	}
	c.trouble = t
}

// readOnlyRefs says why a snapshot of h at path is not held for the refs
// an engine reads, or "": a ref (refs/main) naming another commit in a
// Hugging Face cache mounted read-only (a site's shared cache). An engine
// given the repository id there loads the other commit, and the Prolog
// cannot point the ref back, so a job sent there fails. Where the cache
// can be written, the Prolog points it back, and the snapshot is held.
func readOnlyRefs(path string, h catalog.Hub) string {
	repo := path + "/../.."
	for _, ref := range catalog.HubRefs(h) {
		b, err := catalog.ReadHubRef(repo + "/refs/" + ref)
		if err == nil && b == h.Commit {
			continue
		}
		var st syscall.Statfs_t
		if syscall.Statfs(repo, &st) != nil || st.Flags&stRdonly == 0 {
			return ""
		}
		names := "names no commit"
		if c := strings.TrimSpace(b); err == nil && catalog.ValidCommit(c) {
			names = "names " + c
		}
		return fmt.Sprintf("refs/%s %s, not %s, and the Hugging Face cache is read-only here: an engine given %s would load that, and the Prolog cannot point the ref back (its admin can, or register the model at that commit)", ref, names, h.Commit, h.Repo)
	}
	return ""
}

// stRdonly is statfs's ST_RDONLY flag: the filesystem is mounted
// read-only.
const stRdonly = 0x1

// hubConfigs are the files one of which an engine needs beside
// safetensors to load them: transformers' and vLLM's config.json,
// Mistral's own params.json (vLLM's --config-format mistral), a PEFT
// adapter's adapter_config.json.
var hubConfigs = []string{"config.json", "params.json", "adapter_config.json"}

// checkHubConfigs holds a Hugging Face cache snapshot scanned without a
// catalog list to what an engine needs beside its safetensors: a
// config.json in each directory that holds them. A snapshot with every
// shard and the index but no config.json is a download that stopped
// before it (huggingface_hub fetches in no fixed order), and no engine
// loads it (issue 25).
func (c *candidate) checkHubConfigs() {
	dirs := map[string]bool{}
	for r := range c.weights {
		if strings.EqualFold(path.Ext(r), ".safetensors") {
			dirs[path.Dir(r)] = true
		}
	}
	for dir := range dirs {
		found := false
		for _, name := range hubConfigs {
			p := path.Join(dir, name)
			if st, err := os.Stat(c.path + "/" + p); err == nil && st.Mode().IsRegular() {
				found = true
				break
			}
		}
		if !found {
			c.trouble.file(path.Join(dir, "config.json"), "missing beside the safetensors: no engine loads them without it (a download that stopped before it?)")
		}
	}
}

// trouble collects what is wrong with a candidate: named files (missing,
// empty, broken) and general problems, in the order found, and renders them
// as one Problem line that a person can act on.
type trouble struct {
	general []string
	files   []string // "NAME (why)"
	seen    map[string]bool
}

func (t *trouble) add(msg string) {
	if t.seen == nil {
		t.seen = map[string]bool{}
	}
	if !t.seen[msg] {
		t.seen[msg] = true
		t.general = append(t.general, msg)
	}
}

func (t *trouble) file(name, why string) {
	if t.seen == nil {
		t.seen = map[string]bool{}
	}
	if !t.seen["f:"+name] {
		t.seen["f:"+name] = true
		t.files = append(t.files, quoteName(name)+" ("+why+")")
	}
}

func (t *trouble) empty() bool { return len(t.general) == 0 && len(t.files) == 0 }

// maxNamed is how many files one Problem names before summarising.
const maxNamed = 3

// String renders the trouble sorted, so that the same tree gives the same
// Problem on every scan whatever order its directories were read in.
func (t *trouble) String() string {
	parts := slices.Sorted(slices.Values(t.general))
	files := slices.Sorted(slices.Values(t.files))
	switch n := len(files); {
	case n == 1:
		parts = append(parts, files[0])
	case n > 1:
		shown := files[:min(n, maxNamed)]
		s := fmt.Sprintf("%d files missing or unusable: %s", n, strings.Join(shown, ", "))
		if n > len(shown) {
			s += fmt.Sprintf(", and %d more", n-len(shown))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// quoteName quotes a name for a message when it holds anything a
// terminal or a log line would mangle (newlines, control characters,
// invalid UTF-8), and leaves ordinary names as they are.
func quoteName(name string) string {
	if needsQuote(name) {
		return strconv.Quote(name)
	}
	return name
}

// needsQuote reports whether a name must be quoted to be shown on one
// line: it holds a control character, invalid UTF-8, or spaces at its ends.
// Such names are legal on Linux and turn up in real model directories.
func needsQuote(s string) bool {
	if strings.TrimSpace(s) != s {
		return true
	}
	for _, r := range s {
		// Invalid UTF-8 decodes as U+FFFD; a real U+FFFD is rare enough
		// to be quoted too.
		if r == 0xFFFD || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return false
}
