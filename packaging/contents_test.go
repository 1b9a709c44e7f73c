//go:build integration

// Package packaging holds the description of llmgw's .deb and .rpm
// (nfpm.yaml) and the files they install; this test guards what the
// packages contain. scripts/test-package builds them and runs it.
package packaging

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*-contents.golden from the packages")

// TestPackageContents compares each package's file list (names, modes,
// owners), its config files and its dependencies with a golden list: a file
// added, dropped, moved, made executable or no longer kept on upgrade by
// accident shows up in review as a change to the golden file. Sizes and
// dates are left out, since every build changes them.
//
//	LLMGW_DEB=$PWD/dist/llmgw_..._amd64.deb LLMGW_RPM=$PWD/dist/llmgw-....rpm \
//	    go test -tags integration ./packaging -run TestPackageContents [-update]
func TestPackageContents(t *testing.T) {
	for _, pkg := range []struct {
		env, golden string
		list        func(t *testing.T, file string) []byte
	}{
		{"LLMGW_DEB", "testdata/deb-contents.golden", debContents},
		{"LLMGW_RPM", "testdata/rpm-contents.golden", rpmContents},
	} {
		t.Run(pkg.env, func(t *testing.T) {
			file := os.Getenv(pkg.env)
			if file == "" {
				t.Skip(pkg.env + " is not set: scripts/test-package builds the packages and runs this test on them")
			}
			got := pkg.list(t, file)
			if *update {
				if err := os.WriteFile(pkg.golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(pkg.golden)
			if err != nil {
				t.Fatalf("%v; create it with -update", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from %s; if the change is meant, rerun with -update and commit it.\ngot:\n%s\nwant:\n%s", file, pkg.golden, got, want)
			}
		})
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// debContents: `dpkg-deb --contents` without sizes and dates, then the
// conffiles and the dependencies.
func debContents(t *testing.T, deb string) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(run(t, "dpkg-deb", "--contents", deb), "\n") {
		// drwxr-xr-x root/root 0 2026-12-03 08:07 ./etc/
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb line %q: want mode owner size date time path", line)
		}
		b.WriteString(f[0] + " " + f[1] + " " + strings.Join(f[5:], " ") + "\n")
	}
	for _, c := range strings.Split(run(t, "dpkg-deb", "--info", deb, "conffiles"), "\n") {
		b.WriteString("conffile " + c + "\n")
	}
	for _, field := range []string{"Depends", "Recommends"} {
		b.WriteString(field + ": " + run(t, "dpkg-deb", "--field", deb, field) + "\n")
	}
	return b.Bytes()
}

// rpmContents: `rpm -qlvp` without sizes and dates, then the config files
// with their flags (c: config, n: noreplace), the scriptlets present and the
// requirements.
func rpmContents(t *testing.T, rpm string) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(run(t, "rpm", "-qlvp", rpm), "\n") {
		// -rw-r--r-- 1 root root 2918 Dec 3 08:08 /etc/llmgw/agent.toml
		f := strings.Fields(line)
		if len(f) < 9 {
			t.Fatalf("rpm -qlvp line %q: want mode links owner group size month day time path", line)
		}
		b.WriteString(f[0] + " " + f[2] + "/" + f[3] + " " + strings.Join(f[8:], " ") + "\n")
	}
	for _, line := range strings.Split(run(t, "rpm", "-qp", "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]", rpm), "\n") {
		if flags, path, ok := strings.Cut(line, " "); ok && strings.Contains(flags, "c") {
			b.WriteString("config(" + flags + ") " + path + "\n")
		}
	}
	for _, line := range strings.Split(run(t, "rpm", "-qp", "--scripts", rpm), "\n") {
		if strings.HasSuffix(line, "scriptlet (using /bin/sh):") {
			b.WriteString(line + "\n")
		}
	}
	for _, r := range strings.Split(run(t, "rpm", "-qpR", rpm), "\n") {
		if !strings.HasPrefix(r, "rpmlib(") {
			b.WriteString("requires " + r + "\n")
		}
	}
	return b.Bytes()
}
