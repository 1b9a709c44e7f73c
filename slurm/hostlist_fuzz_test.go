package slurm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzPrefixes are the shapes of node-name text the fuzzer combines:
// ordinary ones, ones ending in a digit or holding dots and dashes, and a
// bare empty prefix (names that are all digits).
var fuzzPrefixes = []string{"n", "gpu", "rack1-n", "a.b", "x9y", "", "node-", "login"}

// fuzzNames turns fuzz bytes into node names, four bytes a name: prefix,
// number (two bytes), and zero-padding (0 to 4 digits, or no number at all).
// Going through a generator rather than raw strings keeps the fuzzer on
// names Slurm accepts as node names, where a difference is Compress's bug.
func fuzzNames(data []byte) []string {
	var names []string
	for len(data) >= 4 {
		prefix := fuzzPrefixes[int(data[0])%len(fuzzPrefixes)]
		num := int(data[1])<<8 | int(data[2])
		width := int(data[3]) % 6
		data = data[4:]
		switch {
		case width == 5 && prefix != "":
			names = append(names, prefix) // no number
		case width == 5:
			names = append(names, "solo")
		default:
			names = append(names, fmt.Sprintf("%s%0*d", prefix, width, num))
		}
	}
	return names
}

// scontrolForFuzz returns a Runner that can run `scontrol show hostnames`,
// or nil: scontrol needs a slurm.conf to start at all (SLURM_CONF, or the
// default), though not a running controller.
func scontrolForFuzz() *Runner {
	if _, err := os.Stat(filepath.Join(DefaultDir, "scontrol")); err != nil {
		return nil
	}
	conf := os.Getenv("SLURM_CONF")
	if conf == "" {
		conf = DefaultConf
	}
	if _, err := os.Stat(conf); err != nil {
		return nil
	}
	return &Runner{}
}

// FuzzCompress feeds random name lists through Compress and checks that
// the list names exactly the same set: by Expand, and, where Slurm is
// installed and configured, by the real `scontrol show hostnames`. The seed
// corpus runs in every `go test`; `go test -fuzz FuzzCompress ./slurm/`
// explores further (about a hundred lists a second, scontrol's pace).
func FuzzCompress(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 7, 0},         // n[1-3,7]
		{1, 0, 99, 3, 1, 0, 100, 0, 1, 0, 98, 3},                 // gpu[098-100]: a padded run across a width
		{1, 0, 1, 0, 1, 0, 1, 3, 1, 0, 2, 0},                     // gpu1, gpu001, gpu2: different nodes
		{4, 0, 5, 0, 4, 0, 6, 2, 4, 0, 0, 5},                     // x9y5, x9y06, x9y: digits inside the prefix
		{5, 0, 1, 0, 5, 0, 2, 0, 5, 0, 10, 2},                    // 1, 2, 10: all-digit names
		{2, 0, 3, 0, 2, 0, 4, 0, 3, 0, 1, 0, 3, 0, 2, 0},         // rack1-n[3-4], a.b[1-2]
		{6, 1, 0, 4, 6, 0, 255, 4, 6, 1, 1, 4},                   // node-[0255-0257]
		{0, 0, 9, 0, 0, 0, 10, 0, 0, 0, 11, 0, 0, 0, 9, 0},       // duplicates, a run over a width change
		{7, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2},         // login, n0, n0, n00
		{0, 255, 255, 0, 0, 255, 254, 0, 0, 0, 0, 4, 0, 0, 0, 0}, // large numbers, n0000 and n0
	} {
		f.Add(seed)
	}
	sc := scontrolForFuzz()
	f.Fuzz(func(t *testing.T, data []byte) {
		names := fuzzNames(data)
		if len(names) == 0 {
			return
		}
		want := slices.Clone(names)
		slices.Sort(want)
		want = slices.Compact(want)
		list := Compress(names)
		got, err := Expand(list)
		if err != nil {
			t.Fatalf("Expand(Compress(%q)) = Expand(%q): %v", names, list, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("Expand(Compress(%q)) = %q via %q, want %q", names, got, list, want)
		}
		if sc == nil {
			return
		}
		out, err := sc.Run(context.Background(), "scontrol", "show", "hostnames", list)
		if err != nil {
			t.Fatalf("scontrol show hostnames %q (Compress(%q)): %v", list, names, err)
		}
		got = strings.Fields(string(out))
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("scontrol show hostnames %q = %q, want %q (Compress(%q))", list, got, want, names)
		}
	})
}
