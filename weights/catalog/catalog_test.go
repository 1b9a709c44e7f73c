package catalog

import "testing"

// The cases of the three formatters FormatBytes replaced (the fetcher's
// disk-full errors, llmgw scan's table, llmgw fetch's progress), which
// printed binary units; every size is now shown in decimal ones.
func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:         "0 B",
		512:       "512 B",
		999:       "999 B",
		1023:      "1.0 kB",
		1024:      "1.0 kB",
		1536:      "1.5 kB",
		3 << 30:   "3.2 GB",
		4 << 30:   "4.3 GB",
		14e9:      "14 GB",
		141 << 30: "151 GB",
		3 << 40:   "3.3 TB",
		-2048:     "-2.0 kB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
