package slurm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSession drives scripts standing in for scontrol's interactive mode
// (fakeScontrol): each command gets its own answer, a line scontrol's
// parser would read otherwise runs as a process of its own, and a
// session that dies or hangs costs the command it was given, never the
// reconcile. The real scontrol is driven on the dev cluster
// (features_integration_test.go).
func TestSession(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	dir := fakeSlurm(t, map[string]string{
		"scontrol": fakeScontrol(log, `case "$*" in *bad*) echo "slurm_update error: Invalid node name specified" >&2; return 1;; esac`),
	})
	r := &Runner{Dir: dir}
	ctx := context.Background()
	s, err := r.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Run(ctx, "update", "NodeName=n1", "ActiveFeatures=a"); err != nil {
		t.Errorf("a good update: %v", err)
	}
	err = s.Run(ctx, "update", "NodeName=bad1", "ActiveFeatures=a")
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Stderr != "slurm_update error: Invalid node name specified" || !strings.Contains(err.Error(), "NodeName=bad1") {
		t.Errorf("a failing update: %v; want its own error, naming it", err)
	}
	if err := s.Run(ctx, "update", "NodeName=n2", "ActiveFeatures=a"); err != nil {
		t.Errorf("the update after a failed one: %v", err)
	}
	long := "ActiveFeatures=" + strings.Repeat("x", sessionMaxLine)
	for _, args := range [][]string{{"update", "NodeName=n3", "AvailableFeatures=a b"}, {"update", "NodeName=n4", long}, {"update", "NodeName=n5", "ActiveFeatures='q'"}} {
		if err := s.Run(ctx, args...); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	got, _ := os.ReadFile(log)
	want := "line: update NodeName=n1 ActiveFeatures=a\n" +
		"line: update NodeName=bad1 ActiveFeatures=a\n" +
		"line: update NodeName=n2 ActiveFeatures=a\n" +
		"args: update NodeName=n3 AvailableFeatures=a b\n" +
		"args: update NodeName=n4 " + long + "\n" +
		"args: update NodeName=n5 ActiveFeatures='q'\n"
	if string(got) != want {
		t.Errorf("scontrol got\n%s\nwant\n%s", got, want)
	}
}

func TestSessionEnds(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	// Answers one command, then exits without reading the next.
	dir := fakeSlurm(t, map[string]string{
		"scontrol": `if [ $# -gt 0 ]; then echo "args: $*" >>'` + log + `'; exit 0; fi
read -r line; echo "line: $line" >>'` + log + `'
read -r marker; echo "invalid keyword: $marker" >&2
exit 0`,
	})
	r := &Runner{Dir: dir}
	ctx := context.Background()
	s, err := r.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, node := range []string{"n1", "n2", "n3"} {
		if err := s.Run(ctx, "update", "NodeName="+node, "ActiveFeatures=a"); err != nil {
			t.Errorf("%s: %v", node, err)
		}
	}
	got, _ := os.ReadFile(log)
	if want := "line: update NodeName=n1 ActiveFeatures=a\nargs: update NodeName=n2 ActiveFeatures=a\nargs: update NodeName=n3 ActiveFeatures=a\n"; string(got) != want {
		t.Errorf("scontrol got\n%s\nwant\n%s", got, want)
	}
}

// TestSessionGoneBeforeWrite: scontrol exited before a command was
// written (a write to its stdin fails with EPIPE): it never read the
// command, which is made as a process of its own, not reported as failed.
func TestSessionGoneBeforeWrite(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	dir := fakeSlurm(t, map[string]string{
		"scontrol": `if [ $# -gt 0 ]; then echo "args: $*" >>'` + log + `'; exit 0; fi
exec 0<&-
exit 0`,
	})
	r := &Runner{Dir: dir}
	ctx := context.Background()
	s, err := r.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-s.done // scontrol closed its stdin, then exited: the write meets EPIPE
	if err := s.Run(ctx, "update", "NodeName=n1", "ActiveFeatures=a"); err != nil {
		t.Errorf("n1: %v", err)
	}
	if s.Alive() {
		t.Error("the session says it is alive after scontrol exited")
	}
	got, _ := os.ReadFile(log)
	if want := "args: update NodeName=n1 ActiveFeatures=a\n"; string(got) != want {
		t.Errorf("scontrol got\n%s\nwant\n%s", got, want)
	}
}

func TestSessionHangs(t *testing.T) {
	log := filepath.Join(t.TempDir(), "calls")
	dir := fakeSlurm(t, map[string]string{
		"scontrol": `if [ $# -gt 0 ]; then echo "args: $*" >>'` + log + `'; exit 0; fi
exec sleep 30`,
	})
	r := &Runner{Dir: dir, Timeout: 200 * time.Millisecond}
	ctx := context.Background()
	s, err := r.StartSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	if err := s.Run(ctx, "update", "NodeName=n1", "ActiveFeatures=a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no answer: %v; want a deadline error", err)
	}
	if err := s.Run(ctx, "update", "NodeName=n2", "ActiveFeatures=a"); err != nil {
		t.Errorf("after the session hung: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	if got, _ := os.ReadFile(log); string(got) != "args: update NodeName=n2 ActiveFeatures=a\n" {
		t.Errorf("scontrol got %q", got)
	}
}

func TestPacer(t *testing.T) {
	p := Pacer{Share: 0.5}
	if d := p.Pause(time.Millisecond); d != time.Millisecond {
		t.Errorf("half the time: paused %s after a 1 ms call, want 1 ms", d)
	}
	// Calls of 1 ms, one of them lucky (0.1 ms): none is slow for it.
	for i := range 20 {
		d := time.Millisecond
		if i == 5 {
			d = 100 * time.Microsecond
		}
		p.Pause(d)
	}
	if p.Braked != 0 {
		t.Errorf("usual calls braked %d times", p.Braked)
	}
	// 10 ms is over 3x the usual: the brake adds the call's own time,
	// then doubles while calls stay slow.
	if d := p.Pause(10 * time.Millisecond); d != 20*time.Millisecond {
		t.Errorf("a slow call: paused %s, want 20 ms", d)
	}
	if d := p.Pause(10 * time.Millisecond); d != 30*time.Millisecond {
		t.Errorf("a second slow call: paused %s, want 30 ms", d)
	}
	if d := p.Pause(time.Millisecond); d != 11*time.Millisecond {
		t.Errorf("a usual call after: paused %s, want 11 ms (the brake halved)", d)
	}
	if p.Braked != 2 {
		t.Errorf("Braked %d, want 2", p.Braked)
	}
	// Calls slow for good: the usual follows them, and the brake lets go.
	for range 200 {
		p.Pause(10 * time.Millisecond)
	}
	if d := p.Pause(10 * time.Millisecond); d != 10*time.Millisecond {
		t.Errorf("calls of 10 ms for a while: paused %s, want the share's 10 ms alone", d)
	}
	// Never more than MaxPause.
	for range 5 {
		p.Pause(5 * time.Second)
	}
	if d := p.Pause(5 * time.Second); d != DefaultMaxPause {
		t.Errorf("calls of 5 s: paused %s, want at most %s", d, DefaultMaxPause)
	}
	q := Pacer{Share: 1}
	if d := q.Pause(time.Millisecond); d != 0 {
		t.Errorf("Share 1: paused %s", d)
	}
}

// TestPacerFollowsUsers: the share moves with what a user's read takes
// (the median of the last three) against its median before the run: down
// by a third when slower than Target times it, down to MinShare, and back
// up while well within; one slow or one quick read moves nothing.
func TestPacerFollowsUsers(t *testing.T) {
	p := Pacer{ProbeEvery: 2, Share: 0.5}
	if !p.WantProbe() {
		t.Fatal("no read timed before the first call")
	}
	// The base: the median of the first five, one of them lucky.
	for _, d := range []time.Duration{3, 1, 2, 2, 3} {
		p.Probed(d * time.Millisecond)
	}
	if p.WantProbe() {
		t.Error("a sixth read before any call")
	}
	p.Pause(time.Millisecond)
	if p.WantProbe() {
		t.Error("a read after one call of every two")
	}
	p.Pause(time.Millisecond)
	if !p.WantProbe() {
		t.Error("no read after two calls")
	}
	// One slow read among usual ones: nothing moves.
	for _, d := range []time.Duration{2, 9, 2} {
		p.Probed(d * time.Millisecond)
	}
	if p.Slowed != 0 || p.share < 0.5 {
		t.Errorf("one slow read among quick ones: share %v, slowed %d; want no cut", p.share, p.Slowed)
	}
	// Users' reads 3x slower: a third less share each time, to the floor
	// (half: a reconcile at most twice as long).
	for range 12 {
		p.Probed(6 * time.Millisecond)
	}
	if p.share != MinShare || p.LowestShare != MinShare {
		t.Errorf("after slow reads: share %v, lowest %v; want %v", p.share, p.LowestShare, MinShare)
	}
	if d := p.Pause(time.Millisecond); d != time.Millisecond {
		t.Errorf("at half of slurmctld's time: paused %s after a 1 ms call, want 1 ms", d)
	}
	// Reads as quick as before: the share back up to all of it.
	for range 20 {
		p.Probed(2 * time.Millisecond)
	}
	if p.share != 1 {
		t.Errorf("after quick reads: share %v, want 1", p.share)
	}
	// In between (1.3 > 1.2 > 1.15): the share stays.
	for range 3 {
		p.Probed(2400 * time.Microsecond)
	}
	if p.share != 1 {
		t.Errorf("reads 1.2x the base moved the share to %v", p.share)
	}
}
