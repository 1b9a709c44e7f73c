//go:build integration

// Package packaging holds the description of llmgw's .deb and .rpm
// (nfpm.yaml) and the files they install; this test guards what the .deb
// contains. scripts/test-package builds the package and runs it.
package packaging

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/deb-contents.golden from the package")

const golden = "testdata/deb-contents.golden"

// TestDebContents compares the .deb's file list, names and modes and owners,
// with the golden list: a file added, dropped, moved or made executable by
// accident shows up in review as a change to the golden file. Sizes and
// dates are left out, since every build changes them.
//
//	LLMGW_DEB=dist/llmgw_..._amd64.deb go test -tags integration ./packaging -run TestDebContents [-update]
func TestDebContents(t *testing.T) {
	deb := os.Getenv("LLMGW_DEB")
	if deb == "" {
		t.Skip("LLMGW_DEB is not set: scripts/test-package builds the package and runs this test on it")
	}
	out, err := exec.Command("dpkg-deb", "--contents", deb).Output()
	if err != nil {
		t.Fatalf("dpkg-deb --contents %s: %v", deb, err)
	}
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// drwxr-xr-x root/root 0 2026-12-03 08:07 ./etc/
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb line %q: want mode owner size date time path", line)
		}
		b.WriteString(f[0] + " " + f[1] + " " + strings.Join(f[5:], " ") + "\n")
	}
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v; create it with -update", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("%s contents differ from %s; if the change is meant, rerun with -update and commit it.\ngot:\n%s\nwant:\n%s", deb, golden, b.String(), want)
	}
}
