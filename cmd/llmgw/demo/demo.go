// Package demo is `llmgw demo`: the run (run.go: the coordinator and agents
// started from llmgw's own binary, the commands shown, the cleanup), the
// weight files it generates, the local origin that serves them, and the
// sentences that say what each step's output shows. cmd/llmgw only parses
// the command's flags.
package demo

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"unicode/utf8"
)

// A Node is one simulated node: its Slurm name and its fabric, and whether
// it sees the shared filer.
type Node struct {
	Name   string
	Fabric string
	Filer  bool
}

// Nodes are the simulated nodes, named and grouped like the dev cluster's
// (scripts/dev-cluster: ib-a on n[1-2], ib-b on n[3-4]), so that on a machine
// where that cluster is up the coordinator's view and Slurm's agree and a
// real job can be steered to the node that holds its model. Fabric ib-a sees
// the shared filer.
var Nodes = []Node{
	{Name: "n1", Fabric: "ib-a", Filer: true},
	{Name: "n2", Fabric: "ib-a", Filer: true},
	{Name: "n3", Fabric: "ib-b"},
	{Name: "n4", Fabric: "ib-b"},
}

// A Weight is one generated weight file.
type Weight struct {
	Model string // catalog name
	File  string // file name
	Size  int64
	Seed  uint64
}

// The three models the demo registers: one on the shared filer, one held
// only on a node's own disk, one on the origin that no node holds.
var (
	Shared = Weight{Model: "llama-70b", File: "llama-70b.gguf", Size: 64 << 20, Seed: 1}
	Local  = Weight{Model: "qwen-7b", File: "qwen-7b.gguf", Size: 64 << 20, Seed: 2}
	Remote = Weight{Model: "mistral-7b", File: "mistral-7b.gguf", Size: 128 << 20, Seed: 3}
)

// LocalHolder is the node whose own disk holds Local.
const LocalHolder = "n3"

// Generate writes w.Size bytes from a PRNG seeded with w.Seed to path and
// returns their sha256 in hex. The same seed always gives the same bytes,
// so the digest registered with the catalog is known before any fetch and
// a fetch that corrupted a byte would fail its check.
func Generate(path string, w Weight) (string, error) {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], w.Seed)
	src := rand.NewChaCha8(seed)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", fmt.Errorf("generate %s: %w", w.Model, err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), io.LimitReader(src, w.Size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("generate %s: %w", w.Model, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// columnGap is what separates the columns of llmgw's tables (tabwriter with
// padding 2); a cell never holds two spaces in a row.
var columnGap = regexp.MustCompile(`\s{2,}`)

// Realign lines up again the columns of the tables in text after their
// cells changed width (the demo writes its temporary directory as $DEMO).
// A table is a run of two or more non-blank lines that all split into the
// same number of cells, more than one; any other line is left as it is.
func Realign(text string) string {
	lines := strings.Split(text, "\n")
	var out []string
	for i := 0; i < len(lines); {
		j, n := i, len(columnGap.Split(strings.TrimRight(lines[i], " "), -1))
		for j < len(lines) && strings.TrimSpace(lines[j]) != "" && len(columnGap.Split(strings.TrimRight(lines[j], " "), -1)) == n {
			j++
		}
		if n < 2 || j-i < 2 {
			out = append(out, lines[i])
			i++
			continue
		}
		rows := make([][]string, 0, j-i)
		widths := make([]int, n)
		for _, l := range lines[i:j] {
			cells := columnGap.Split(strings.TrimRight(l, " "), -1)
			for k, c := range cells {
				widths[k] = max(widths[k], utf8.RuneCountInString(c))
			}
			rows = append(rows, cells)
		}
		for _, cells := range rows {
			var b strings.Builder
			for k, c := range cells {
				b.WriteString(c)
				if k < len(cells)-1 {
					b.WriteString(strings.Repeat(" ", widths[k]-utf8.RuneCountInString(c)+2))
				}
			}
			out = append(out, b.String())
		}
		i = j
	}
	return strings.Join(out, "\n")
}
