package catalog

import (
	"strings"
	"testing"
)

func TestOtherSHA256(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("B", 64)
	for _, tc := range []struct{ msg, want string }{
		{"verify x: sha256 mismatch: expected " + a + ", got " + b + "; discarded", strings.ToLower(b)},
		{"the catalog expects sha256 " + a + " but the hub publishes " + b, strings.ToLower(b)},
		{"only " + a, ""},
		{"too long " + a + "0 and " + a[:63], ""},
	} {
		if got := OtherSHA256(tc.msg, a); got != tc.want {
			t.Errorf("OtherSHA256(%q) = %q; want %q", tc.msg, got, tc.want)
		}
	}
}

func TestCopyCarriesThePin(t *testing.T) {
	dir := t.TempDir()
	m := Model{Name: "m", Source: "https://o.example/w.gguf", Pinned: strings.Repeat("c", 64), PinnedETag: `"e1"`}
	if err := WriteCopy(dir+"/catalog.json", Copy{Coordinator: "http://c", Models: []Model{m}}); err != nil {
		t.Fatal(err)
	}
	cp, err := ReadCopy(dir + "/catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := cp.Lookup("m"); !ok || got.Pinned != m.Pinned || got.PinnedETag != m.PinnedETag || got.WantSHA256() != m.Pinned {
		t.Errorf("read back %+v; want the pin", got)
	}
}
