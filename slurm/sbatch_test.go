package slurm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseSbatchArgs(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     SbatchOptions
		wantOwn  []string
		wantRest []string // nil: args without the own ones
		wantErr  string
	}{
		{name: "long forms, script and its args",
			args: []string{"--constraint=ib-b", "--prefer", "x", "--nodes=2-4", "--partition", "debug", "job.sh", "-N", "9"},
			want: SbatchOptions{Constraint: "ib-b", Prefer: "x", Nodes: 2, Partition: "debug", Script: 6}},
		{name: "short forms, glued and clustered",
			args: []string{"-C", "ib-a", "-N2", "-Hp", "debug", "-xn1", "-w", "n2", "--parsable", "s.sh"},
			want: SbatchOptions{Constraint: "ib-a", Nodes: 2, Partition: "debug", Exclude: "n1", NodeList: "n2", Parsable: true, Script: 9}},
		{name: "abbreviated long options",
			args: []string{"--const=ib-b", "--part", "p12", "--comm", "hi", "--pars", "--wrap", "true"},
			want: SbatchOptions{Constraint: "ib-b", Partition: "p12", Comment: "hi", Parsable: true, Wrap: true, Script: -1}},
		{name: "own flags anywhere before the script",
			args:     []string{"--model", "m1", "-N", "1", "--coordinator=http://c", "run.sh", "--model", "x"},
			want:     SbatchOptions{Nodes: 1, Script: 2},
			wantOwn:  []string{"--model=m1", "--coordinator=http://c"},
			wantRest: []string{"-N", "1", "run.sh", "--model", "x"}},
		{name: "double dash ends options",
			args: []string{"-N1", "--", "-script-"},
			want: SbatchOptions{Nodes: 1, Script: 2}},
		{name: "optional-argument option does not take the next word",
			args: []string{"--exclusive", "job.sh"},
			want: SbatchOptions{Script: 1}},
		{name: "unknown long option passes through",
			args: []string{"--pyxis-image=x", "job.sh"},
			want: SbatchOptions{Script: 1}},
		{name: "spank option seen",
			args: []string{"--llmgw-model=m2", "job.sh"},
			want: SbatchOptions{SpankModel: "m2", Script: 1}},
		{name: "ambiguous abbreviation", args: []string{"--no", "x"}, wantErr: "ambiguous"},
		{name: "missing value", args: []string{"-p"}, wantErr: "needs a value"},
		{name: "bad node count", args: []string{"-N", "two", "x"}, wantErr: "node count"},
		{name: "unknown short option", args: []string{"-Z", "x"}, wantErr: "unknown sbatch option -Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, own, rest, err := ParseSbatchArgs(tt.args, "model", "coordinator", "token-file")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("options = %+v\nwant      %+v", got, tt.want)
			}
			if !slices.Equal(own, tt.wantOwn) {
				t.Errorf("own = %q, want %q", own, tt.wantOwn)
			}
			wantRest := tt.wantRest
			if wantRest == nil {
				wantRest = tt.args
			}
			if !slices.Equal(rest, wantRest) {
				t.Errorf("rest = %q, want %q", rest, wantRest)
			}
			if got.Script >= 0 && got.Script >= len(rest) {
				t.Errorf("script index %d outside rest %q", got.Script, rest)
			}
		})
	}
}

func TestDirectivesAndEffective(t *testing.T) {
	script := []byte(`#!/bin/bash
#SBATCH --constraint=ib-b
#SBATCH -N 2 --comment="two words" # trailing comment
#SBATCHX --prefer=ignored
# plain comment

#SBATCH --partition=debug
echo hi
#SBATCH --exclude=n1
`)
	d := Directives(script)
	if want := []string{"--constraint=ib-b", "-N", "2", "--comment=two words", "--partition=debug"}; !slices.Equal(d, want) {
		t.Fatalf("Directives = %q, want %q", d, want)
	}
	dopts, _, _, err := ParseSbatchArgs(d)
	if err != nil {
		t.Fatal(err)
	}
	cmd, _, _, _ := ParseSbatchArgs([]string{"-N", "3", "job.sh"})
	env := map[string]string{"SBATCH_PARTITION": "p12"}
	e := Effective(dopts, cmd, func(k string) string { return env[k] })
	want := SbatchOptions{Constraint: "ib-b", Nodes: 3, Partition: "p12", Comment: "two words", Script: 2}
	if e != want {
		t.Errorf("Effective = %+v\nwant        %+v", e, want)
	}
}

func TestParseFeatureNodes(t *testing.T) {
	out := []byte("n1|debug*|ib-a\nn1|p12|ib-a\nn2|debug*|ib-a,llmgw.m1\nn3|debug*|\n")
	nodes, def, err := ParseFeatureNodes(out)
	if err != nil {
		t.Fatal(err)
	}
	if def != "debug" || len(nodes) != 3 {
		t.Fatalf("default %q, %d nodes: %+v", def, len(nodes), nodes)
	}
	if !slices.Equal(nodes[0].Partitions, []string{"debug", "p12"}) || !slices.Equal(nodes[1].Features, []string{"ib-a", "llmgw.m1"}) || nodes[2].Features != nil {
		t.Errorf("nodes = %+v", nodes)
	}
	// Captured from the dev cluster (scontrol-set llmgw features; n3 with
	// none at all prints an empty field).
	b, err := os.ReadFile("testdata/22.05/sinfo-partitions-features.txt")
	if err != nil {
		t.Fatal(err)
	}
	nodes, def, err = ParseFeatureNodes(b)
	if err != nil || def != "debug" || len(nodes) != 4 {
		t.Fatalf("captured sinfo: %v, default %q, %+v", err, def, nodes)
	}
	if !slices.Equal(nodes[3].Features, []string{"ib-b", "llmgw.m1", "llmgw.qwen-2.5"}) || nodes[2].Features != nil {
		t.Errorf("captured sinfo parsed as %+v", nodes)
	}
	if _, _, err := ParseFeatureNodes([]byte("n1|debug\n")); err == nil {
		t.Error("a line with two fields parsed")
	}
}

func TestPreferRejected(t *testing.T) {
	for msg, want := range map[string]bool{
		"sbatch: error: Batch job submission failed: Invalid preferred feature specification":       true,
		"sbatch: error: Batch job submission failed: Requested node configuration is not available": true,
		"sbatch: error: Batch job submission failed: Invalid feature specification":                 false,
		"sbatch: error: Batch job submission failed: Invalid partition name specified":              false,
	} {
		if got := PreferRejected(msg); got != want {
			t.Errorf("PreferRejected(%q) = %v", msg, got)
		}
	}
}

func TestSubmissionArgv(t *testing.T) {
	s := Submission{
		Args:   []string{"-N", "2", "job.sh", "--prefer=x"},
		Script: 2,
		Added:  Composition{Prefer: "llmgw.m1*1", Exclude: []string{"n1", "n3", "n4"}, Comment: "llmgw:model=m1"},
	}
	want := []string{"-N", "2", "--prefer=llmgw.m1*1", "--exclude=n[1,3-4]", "--comment=llmgw:model=m1", "job.sh", "--prefer=x"}
	if got := s.Argv(true); !slices.Equal(got, want) {
		t.Errorf("Argv(true) = %q\nwant %q", got, want)
	}
	s.Script = -1
	s.Args = []string{"--wrap", "true"}
	if got := s.Argv(false); !slices.Equal(got, []string{"--wrap", "true", "--exclude=n[1,3-4]", "--comment=llmgw:model=m1"}) {
		t.Errorf("Argv(false) = %q", got)
	}
}

// fakeSbatch writes an sbatch that refuses any --prefer the way Slurm does
// when the features changed under it, records its arguments, and otherwise
// submits job 42.
func fakeSbatch(t *testing.T) (dir, argsLog string) {
	t.Helper()
	dir = t.TempDir()
	argsLog = filepath.Join(dir, "args")
	script := `#!/bin/sh
echo "$*" >>` + argsLog + `
for a in "$@"; do
	case $a in --prefer=*) echo "sbatch: error: Batch job submission failed: Requested node configuration is not available" >&2; exit 1;; esac
	case $a in --bad) echo "sbatch: error: Invalid partition name specified" >&2; exit 1;; esac
done
cat >/dev/null
echo "Submitted batch job 42"
`
	if err := os.WriteFile(filepath.Join(dir, "sbatch"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, argsLog
}

func TestSubmitRetriesWithoutPreference(t *testing.T) {
	dir, argsLog := fakeSbatch(t)
	r := &Runner{Dir: dir}
	var stdout, stderr bytes.Buffer
	var refusal string
	s := Submission{Args: []string{"job.sh"}, Script: 0, Added: Composition{Prefer: "llmgw.m1", Comment: "llmgw:model=m1"}, Stdin: []byte("#!/bin/sh\n")}
	status, err := r.Submit(context.Background(), s, &stdout, &stderr, func(m string) { refusal = m })
	if err != nil || status != 0 {
		t.Fatalf("Submit = %d, %v", status, err)
	}
	if stdout.String() != "Submitted batch job 42\n" || stderr.Len() != 0 {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	if !strings.Contains(refusal, "Requested node configuration is not available") {
		t.Errorf("refusal = %q", refusal)
	}
	calls, _ := os.ReadFile(argsLog)
	if want := "--prefer=llmgw.m1 --comment=llmgw:model=m1 job.sh\n--comment=llmgw:model=m1 job.sh\n"; string(calls) != want {
		t.Errorf("sbatch calls:\n%s\nwant:\n%s", calls, want)
	}
}

func TestSubmitPassesOtherFailuresThrough(t *testing.T) {
	dir, argsLog := fakeSbatch(t)
	r := &Runner{Dir: dir}
	var stdout, stderr bytes.Buffer
	s := Submission{Args: []string{"--bad", "job.sh"}, Script: 1, Added: Composition{Comment: "llmgw:model=m1"}}
	status, err := r.Submit(context.Background(), s, &stdout, &stderr, func(string) { t.Error("retried a failure that is not the preference's") })
	if err != nil || status != 1 {
		t.Fatalf("Submit = %d, %v; want sbatch's own status 1", status, err)
	}
	if !strings.Contains(stderr.String(), "Invalid partition name") {
		t.Errorf("stderr %q lacks sbatch's message", stderr.String())
	}
	if calls, _ := os.ReadFile(argsLog); strings.Count(string(calls), "\n") != 1 {
		t.Errorf("sbatch called %d times, want once", strings.Count(string(calls), "\n"))
	}
}
