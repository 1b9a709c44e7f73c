package slurm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestCompress(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		want  string
	}{
		{"empty", nil, ""},
		{"one", []string{"n1"}, "n1"},
		{"run", []string{"n1", "n2", "n3", "n4"}, "n[1-4]"},
		{"gap", []string{"n1", "n2", "n3", "n4", "n7"}, "n[1-4,7]"},
		{"unsorted with duplicates", []string{"n7", "n2", "n1", "n2", "n4", "n3", "n7"}, "n[1-4,7]"},
		{"numeric not lexical order", []string{"n10", "n9", "n2", "n1"}, "n[1-2,9-10]"},
		{"zero padding kept", []string{"gpu003", "gpu001", "gpu002"}, "gpu[001-003]"},
		{"padded group takes same-width unpadded", []string{"gpu099", "gpu100", "gpu098"}, "gpu[098-100]"},
		{"padded and unpadded are different nodes", []string{"gpu1", "gpu001", "gpu2"}, "gpu[1-2],gpu001"},
		{"single padded", []string{"n01"}, "n01"},
		{"mixed prefixes", []string{"login", "n2", "gpu01", "n1", "gpu02"}, "gpu[01-02],login,n[1-2]"},
		{"bare name beside its numbered group", []string{"n2", "n", "n1"}, "n,n[1-2]"},
		{"dots and dashes in prefix", []string{"rack-1.n2", "rack-1.n1"}, "rack-1.n[1-2]"},
		{"zero", []string{"n0", "n1"}, "n[0-1]"},
		{"empty names skipped", []string{"", "n1", ""}, "n1"},
		{"too many digits stays whole", []string{"n1234567890123456789", "n1"}, "n1,n1234567890123456789"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compress(tc.names); got != tc.want {
				t.Errorf("Compress(%q) = %q, want %q", tc.names, got, tc.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	tests := []struct {
		list string
		want []string
	}{
		{"", nil},
		{"n1", []string{"n1"}},
		{"n[1-3],login", []string{"n1", "n2", "n3", "login"}},
		{"n[1-2,7]", []string{"n1", "n2", "n7"}},
		{"n[08-10]", []string{"n08", "n09", "n10"}},
		{"gpu[001-003]", []string{"gpu001", "gpu002", "gpu003"}},
		{"n[1,1]", []string{"n1", "n1"}}, // as scontrol show hostnames
		{"n[9-11],m[3]", []string{"n9", "n10", "n11", "m3"}},
		{"[1-2]", []string{"1", "2"}},
	}
	for _, tc := range tests {
		t.Run(tc.list, func(t *testing.T) {
			got, err := Expand(tc.list)
			if err != nil {
				t.Fatalf("Expand(%q): %v", tc.list, err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Expand(%q) = %q, want %q", tc.list, got, tc.want)
			}
		})
	}
}

func TestExpandErrors(t *testing.T) {
	tests := []struct {
		list    string
		errPart string
	}{
		{"n[1-3", "never closed"},
		{"n1-3]", "without '['"},
		{"n[[1]]", "nested"},
		{"n[]", "empty brackets"},
		{"n1,,n2", "empty name"},
		{",n1", "empty name"},
		{"n[3-1]", "backwards"},
		{"n[a-b]", "not a number"},
		{"n[1-]", "empty number"},
		{"n[-1]", "empty number"},
		{"n[1,]", "empty number"},
		{"n[1-2]-ib", "after ']'"},
		{"a[1-2]b[1-2]", "more than one bracket group"},
		{"n[1-9999999999999999999]", "more than 18 digits"},
		{"n[1-999999999]", "more than"},
		{fmt.Sprintf("n[1-%d]", MaxExpand+1), "more than"},
		{fmt.Sprintf("n[1-%d],x", MaxExpand), "more than"},
	}
	for _, tc := range tests {
		t.Run(tc.list, func(t *testing.T) {
			got, err := Expand(tc.list)
			if err == nil {
				t.Fatalf("Expand(%q) = %d names, want an error containing %q", tc.list, len(got), tc.errPart)
			}
			if !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("Expand(%q) error = %q, want it to contain %q", tc.list, err, tc.errPart)
			}
		})
	}
}

func TestExpandAtLimit(t *testing.T) {
	got, err := Expand(fmt.Sprintf("n[1-%d]", MaxExpand))
	if err != nil {
		t.Fatalf("Expand of exactly MaxExpand names: %v", err)
	}
	if len(got) != MaxExpand {
		t.Errorf("Expand returned %d names, want %d", len(got), MaxExpand)
	}
}

// TestRoundTrip checks Expand(Compress(x)) is x sorted and de-duplicated,
// for random sets of names of the shapes clusters use.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	prefixes := []string{"n", "gpu", "rack2-n", "login"}
	for i := range 200 {
		var names []string
		for range r.IntN(40) {
			p := prefixes[r.IntN(len(prefixes))]
			switch r.IntN(4) {
			case 0:
				names = append(names, p) // bare
			case 1:
				names = append(names, fmt.Sprintf("%s%03d", p, r.IntN(120)))
			default:
				names = append(names, fmt.Sprintf("%s%d", p, r.IntN(30)))
			}
		}
		list := Compress(names)
		got, err := Expand(list)
		if err != nil {
			t.Fatalf("case %d: Expand(Compress(%q)) = Expand(%q): %v", i, names, list, err)
		}
		want := slices.Clone(names)
		slices.Sort(want)
		want = slices.Compact(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("case %d: Expand(Compress(%q)) = %q via %q, want %q", i, names, got, list, want)
		}
		if again := Compress(got); again != list {
			t.Fatalf("case %d: Compress is not stable: %q then %q", i, list, again)
		}
	}
}

func BenchmarkCompress1000(b *testing.B) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("n%d", (i*7919)%1500)
	}
	for b.Loop() {
		Compress(names)
	}
}
