// Package slurm is everything llmgw says to Slurm and hears back: hostlists,
// the runner that calls sinfo and scontrol, and the parsers of their output.
// It imports no other llmgw package, so the hooks, the agent and the
// coordinator can all use it without pulling each other in.
//
// The behaviour it relies on was observed on Slurm 22.05.8 (Debian 12); the
// parsers are tested on output captured from that version under
// testdata/22.05/.
package slurm

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxExpand bounds how many names Expand returns for one list. A hostlist is
// a compressed form, so a short string such as "n[1-999999999]" would
// otherwise allocate gigabytes; real clusters are far below this.
const MaxExpand = 1 << 17

// maxDigits is the longest numeric suffix treated as a number. Longer runs
// of digits would overflow; such names are kept whole by Compress and
// rejected inside brackets by Expand.
const maxDigits = 18

// Compress returns names as one Slurm hostlist expression, the form
// scontrol and sinfo accept: "n[1-4,7]", "gpu[001-003]", "login,n[1-2]".
//
// The names are sorted and de-duplicated first, so any order gives the same
// string. Names are grouped by the text before their trailing number and by
// zero-padding: "gpu001" and "gpu1" are different nodes and land in
// different groups, while "gpu099" and "gpu100" share the width-3 group.
// Names without a trailing number stand alone. Groups are joined with
// commas in sorted order. Compress(nil) is "".
//
// Empty names are skipped. Other names must be valid Slurm node names (no
// ',', '[' or ']'); Compress does not check, as it has no way to report an
// error and Slurm would reject such a name anyway.
func Compress(names []string) string {
	// Padded widths seen per prefix: an unpadded number of the same length
	// ("gpu100" beside "gpu099") belongs to that padded group.
	padded := map[string]map[int]bool{}
	type parsed struct {
		prefix string
		num    uint64
		width  int // 0: unpadded; else the zero-padded digit count
		hasNum bool
		name   string
	}
	ps := make([]parsed, 0, len(names))
	for _, n := range names {
		if n == "" {
			continue // not a node; it would print as a stray comma
		}
		prefix, digits := splitNumber(n)
		if digits == "" {
			ps = append(ps, parsed{prefix: n, name: n})
			continue
		}
		num, _ := strconv.ParseUint(digits, 10, 64) // splitNumber bounds the length
		p := parsed{prefix: prefix, num: num, hasNum: true, name: n}
		if len(digits) > 1 && digits[0] == '0' {
			p.width = len(digits)
			if padded[prefix] == nil {
				padded[prefix] = map[int]bool{}
			}
			padded[prefix][p.width] = true
		}
		ps = append(ps, p)
	}
	for i := range ps {
		p := &ps[i]
		if p.hasNum && p.width == 0 {
			if w := len(strconv.FormatUint(p.num, 10)); padded[p.prefix][w] && w > 1 {
				p.width = w
			}
		}
	}

	type groupKey struct {
		prefix string
		width  int
		hasNum bool
	}
	groups := map[groupKey][]uint64{}
	var keys []groupKey
	for _, p := range ps {
		k := groupKey{p.prefix, p.width, p.hasNum}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
			groups[k] = nil
		}
		if p.hasNum {
			groups[k] = append(groups[k], p.num)
		}
	}
	for k, nums := range groups {
		slices.Sort(nums)
		groups[k] = slices.Compact(nums)
	}
	// Sorted by prefix, then bare names before numbered ones, then by the
	// lowest number, the order scontrol's sorted hostlists use.
	slices.SortFunc(keys, func(a, b groupKey) int {
		if c := strings.Compare(a.prefix, b.prefix); c != 0 {
			return c
		}
		if a.hasNum != b.hasNum {
			if !a.hasNum {
				return -1
			}
			return 1
		}
		if a.hasNum {
			if c := compareUint(groups[a][0], groups[b][0]); c != 0 {
				return c
			}
		}
		return a.width - b.width
	})

	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k.prefix)
		if !k.hasNum {
			continue
		}
		nums := groups[k]
		if len(nums) == 1 {
			b.WriteString(pad(nums[0], k.width))
			continue
		}
		b.WriteByte('[')
		for j := 0; j < len(nums); {
			lo := nums[j]
			hi := lo
			for j+1 < len(nums) && nums[j+1] == hi+1 {
				j++
				hi = nums[j]
			}
			j++
			if lo != nums[0] {
				b.WriteByte(',')
			}
			b.WriteString(pad(lo, k.width))
			if hi != lo {
				b.WriteByte('-')
				b.WriteString(pad(hi, k.width))
			}
		}
		b.WriteByte(']')
	}
	return b.String()
}

// Expand returns the names a Slurm hostlist expression stands for, in the
// order written and with duplicates kept, as `scontrol show hostnames` does:
// "n[1-3],login" is n1, n2, n3, login. Expand("") is nil.
//
// Each comma-separated item is a plain name or prefix[ranges], where ranges
// is a comma list of N or LO-HI. The width of LO sets the zero-padding
// ("n[08-10]" is n08, n09, n10). Text after ']' is an error, as in Slurm
// 22.05 ("rack[1-2]-ib" is an invalid hostlist there too). Lists with more
// than one bracket group ("a[1-2]b[1-2]", which Slurm expands as a product)
// are rejected rather than guessed at; llmgw never writes them. The total is
// limited to MaxExpand names.
func Expand(list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	items, err := splitTop(list)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, item := range items {
		if item == "" {
			return nil, fmt.Errorf("expand hostlist %q: empty name between commas", list)
		}
		open := strings.IndexByte(item, '[')
		if open < 0 {
			out = append(out, item)
			if len(out) > MaxExpand {
				return nil, fmt.Errorf("expand hostlist %.60q: more than %d names", list, MaxExpand)
			}
			continue
		}
		closing := strings.IndexByte(item, ']') // splitTop guarantees it exists after open
		prefix, body, rest := item[:open], item[open+1:closing], item[closing+1:]
		if strings.ContainsAny(rest, "[]") {
			return nil, fmt.Errorf("expand hostlist %q: %q has more than one bracket group; multi-dimensional lists are not supported", list, item)
		}
		if rest != "" {
			return nil, fmt.Errorf("expand hostlist %q: text %q after ']' in %q; a range must end the name", list, rest, item)
		}
		if body == "" {
			return nil, fmt.Errorf("expand hostlist %q: empty brackets in %q", list, item)
		}
		for r := range strings.SplitSeq(body, ",") {
			lo, hi, width, err := parseRange(r)
			if err != nil {
				return nil, fmt.Errorf("expand hostlist %q: %q: %w", list, item, err)
			}
			if hi-lo >= uint64(MaxExpand-len(out)) {
				return nil, fmt.Errorf("expand hostlist %.60q: more than %d names", list, MaxExpand)
			}
			for n := lo; ; n++ {
				out = append(out, prefix+pad(n, width))
				if n == hi {
					break
				}
			}
		}
	}
	return out, nil
}

// splitTop splits list at the commas outside brackets and checks that the
// brackets pair up without nesting.
func splitTop(list string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '[':
			if depth > 0 {
				return nil, fmt.Errorf("expand hostlist %q: nested '[' at offset %d", list, i)
			}
			depth++
		case ']':
			if depth == 0 {
				return nil, fmt.Errorf("expand hostlist %q: ']' without '[' at offset %d", list, i)
			}
			depth--
		case ',':
			if depth == 0 {
				items = append(items, list[start:i])
				start = i + 1
			}
		}
	}
	if depth > 0 {
		return nil, fmt.Errorf("expand hostlist %q: '[' is never closed", list)
	}
	return append(items, list[start:]), nil
}

// parseRange parses "N" or "LO-HI" inside brackets. The width of LO is the
// zero-padding of every name in the range, as in Slurm.
func parseRange(r string) (lo, hi uint64, width int, err error) {
	los, his, isRange := strings.Cut(r, "-")
	if lo, err = parseNum(los); err != nil {
		return 0, 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = parseNum(his); err != nil {
			return 0, 0, 0, err
		}
		if hi < lo {
			return 0, 0, 0, fmt.Errorf("range %q runs backwards", r)
		}
	}
	return lo, hi, len(los), nil
}

func parseNum(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty number in range")
	}
	if len(s) > maxDigits {
		return 0, fmt.Errorf("number %q has more than %d digits", s, maxDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	return strconv.ParseUint(s, 10, 64)
}

// splitNumber splits a name into the text before its trailing digits and the
// digits. A name with no trailing digits, or with more than maxDigits of
// them, returns digits "".
func splitNumber(name string) (prefix, digits string) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) || len(name)-i > maxDigits {
		return name, ""
	}
	return name[:i], name[i:]
}

// pad formats n with at least width digits, zero-filled.
func pad(n uint64, width int) string {
	s := strconv.FormatUint(n, 10)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
