// Package slurmtest holds what integration tests need of a live Slurm
// beyond what package slurm offers llmgw itself.
package slurmtest

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Runner runs Slurm's commands: *slurm.Runner. An interface, so that
// package slurm's own tests can use this package.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// recordLine matches the lines slurmctld's _build_node_list logs at debug2,
// one per node config record for every job it tries to place
// (src/slurmctld/node_scheduler.c, the same on 22.05, 24.11 and 26.05); the
// group is the record's nodes.
var recordLine = regexp.MustCompile(`(?:JobId=\d+ (?:matched 0 nodes|filtered all nodes) \(([^)]*)\))|(?:found \d+ usable nodes from config containing (\S+))`)

// live are the job states in which a job still holds, or waits for, nodes.
var live = map[string]bool{"PENDING": true, "CONFIGURING": true, "RUNNING": true, "COMPLETING": true, "SUSPENDED": true, "REQUEUED": true, "RESIZING": true}

// ConfigRecords counts slurmctld's node config records, which Slurm shows
// nowhere (not in scontrol show config, nor sdiag): it raises slurmctld's
// log level to debug2 for a moment, submits a job to partition (one that
// runs at once on the dev cluster), waits until it has left the queue, and
// counts the distinct node lists of the lines above that the
// scheduler logged meanwhile. scripts/bench/features.sh --records counts
// the same way.
func ConfigRecords(t testing.TB, r Runner, partition string) int {
	t.Helper()
	ctx := context.Background()
	out, err := r.Run(ctx, "scontrol", "show", "config")
	if err != nil {
		t.Fatalf("counting config records: %v", err)
	}
	conf := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			conf[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	logFile, level := conf["SlurmctldLogFile"], conf["SlurmctldDebug"]
	if logFile == "" {
		t.Fatalf("counting config records: slurmctld logs to no file (SlurmctldLogFile is not set)")
	}
	if level == "" {
		level = "info"
	}
	st, err := os.Stat(logFile)
	if err != nil {
		t.Fatalf("counting config records: %v", err)
	}
	if _, err := r.Run(ctx, "scontrol", "setdebug", "debug2"); err != nil {
		t.Fatal(err)
	}
	defer r.Run(ctx, "scontrol", "setdebug", level)
	out, err = r.Run(ctx, "sbatch", "--parsable", "-p", partition, "-N1", "-J", "llmgw-records", "-o", "/dev/null", "--wrap", "true")
	if err != nil {
		t.Fatalf("counting config records: %v", err)
	}
	job := strings.TrimSpace(strings.Split(string(out), ";")[0])
	// Placed, the job has logged its records. Then, for the test's sake,
	// until it has left the queue, so that it holds no node a test goes on
	// to drain or count; one that will not end in 30 s is cancelled.
	deadline := time.Now().Add(30 * time.Second)
	placed := false
	for {
		q, err := r.Run(ctx, "squeue", "-h", "-j", job, "-o", "%T")
		// squeue -j may show an ended job (in its end state) until
		// MinJobAge, and may say the id is invalid once it is purged.
		st := strings.TrimSpace(string(q))
		if err != nil || !live[st] {
			break
		}
		placed = placed || st != "PENDING"
		if time.Now().After(deadline) {
			if !placed {
				t.Fatalf("counting config records: job %s still pending after 30 s", job)
			}
			t.Logf("counting config records: job %s still %s after 30 s; cancelled", job, st)
			r.Run(ctx, "scancel", job)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) < st.Size() {
		t.Fatalf("counting config records: %s shrank (rotated?) while counting", logFile)
	}
	seen := map[string]bool{}
	for _, m := range recordLine.FindAllStringSubmatch(string(data[st.Size():]), -1) {
		seen[m[1]+m[2]] = true
	}
	if len(seen) == 0 {
		t.Fatalf("counting config records: slurmctld logged no record for job %s at debug2", job)
	}
	return len(seen)
}
