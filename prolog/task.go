package prolog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/llmgw/llmgw/weights/catalog"
)

// ErrJobFails is returned by TaskProlog when the job must not run: the
// TaskProlog then exits non-zero.
//
// How a job learns that its weights cannot be had, found on the dev
// cluster (Slurm 22.05, docs/slurm/behaviour.md §4, and prolog/full/hooks_integration_test.go
// TestOriginNotFound): the TaskProlog's stdout is read by slurmstepd; each
// "print TEXT" line goes to the job's output (the batch output file, or
// srun's terminal), and a TaskProlog that exits non-zero fails the job at
// once (JobState=FAILED, Reason=NonZeroExitCode, ExitCode=1:0, the script
// never runs; slurmstepd adds "TaskProlog failed status=1") without draining
// the node. The Prolog cannot do this: its failure drains the node and
// requeues the job held. So the Prolog records the failure and the
// TaskProlog prints it and exits 1.
var ErrJobFails = errors.New("the job's model cannot be had")

// Environment variables the TaskProlog sets for the job. HF_HUB_CACHE and
// HF_HUB_OFFLINE are huggingface_hub's own, which transformers, vLLM and
// SGLang read: with them a job of a Hub model runs `vllm serve ORG/NAME`
// unchanged and loads what llmgw fetched.
const (
	EnvModel        = "LLMGW_MODEL"
	EnvModelPath    = "LLMGW_MODEL_PATH"
	EnvHFHubCache   = "HF_HUB_CACHE"
	EnvHFHubOffline = "HF_HUB_OFFLINE"
)

// TaskProlog tells the job where its weights are. It runs as the job's
// user, before each task, and reads the record the Prolog left (the
// TaskProlog's environment has neither the SPANK variables nor the job's
// comment, docs/slurm/behaviour.md §4, so the record is how it knows the model).
// Its stdout is slurmstepd's to parse: "export NAME=value" sets the job's
// environment, "print TEXT" reaches the job's output.
//
// With no record there is nothing to say, unless the job's environment
// names a model (LLMGW_MODEL, set by the SPANK plugin): then the Prolog
// should have left one, and the job is failed with that reason rather than
// started without its weights.
func TaskProlog(runDir, jobID string, getenv func(string) string, stdout io.Writer) error {
	if jobID == "" {
		return nil
	}
	rec, err := catalog.ReadJobRecord(runDir, jobID)
	if errors.Is(err, os.ErrNotExist) {
		if m := getenv(EnvModel); m != "" {
			return fail(stdout, fmt.Sprintf("job %s asks for model %s, but the Prolog on %s left no record of its weights (see slurmd's log on that node)", jobID, m, nodeName(getenv)))
		}
		return nil
	}
	if err != nil {
		return fail(stdout, fmt.Sprintf("job %s: %v", jobID, err))
	}
	if rec.Error != "" {
		return fail(stdout, rec.Error)
	}
	if !safeValue(rec.Model) || !safeValue(rec.Path) || rec.Path == "" || !safeValue(rec.HFCache) {
		return fail(stdout, fmt.Sprintf("job %s: the record of model %q has a path that cannot be passed in the environment: %q", jobID, rec.Model, rec.Path+rec.HFCache))
	}
	out := fmt.Sprintf("export %s=%s\nexport %s=%s\n", EnvModel, rec.Model, EnvModelPath, rec.Path)
	if rec.HFCache != "" {
		out += fmt.Sprintf("export %s=%s\n", EnvHFHubCache, rec.HFCache)
		if rec.HFOffline {
			out += "export " + EnvHFHubOffline + "=1\n"
		}
	}
	_, err = io.WriteString(stdout, out)
	return err
}

// ConfigFailed is the TaskProlog when the node's configuration cannot be
// read: it cannot find the job's record, so a job whose environment names a
// model (LLMGW_MODEL, from the SPANK plugin) fails with that reason, and any
// other job runs: a broken agent.toml must not fail every job on the node.
func ConfigFailed(jobID string, err error, getenv func(string) string, stdout io.Writer) error {
	if m := getenv(EnvModel); m != "" {
		return fail(stdout, fmt.Sprintf("job %s asks for model %s, but llmgw's configuration on %s cannot be read: %v", jobID, m, nodeName(getenv), err))
	}
	return nil
}

// Reason is how a failure reads wherever llmgw shows it to the job's owner:
// the job's output, its AdminComment.
func Reason(msg string) string { return "llmgw: " + oneLine(msg) }

func fail(stdout io.Writer, msg string) error {
	fmt.Fprintf(stdout, "print %s\n", Reason(msg))
	return fmt.Errorf("%w: %s", ErrJobFails, msg)
}

// safeValue reports whether s can follow "export NAME=" on one line:
// slurmstepd reads the TaskProlog's output line by line, so a newline in a
// path would start a line of its own choosing.
func safeValue(s string) bool { return !strings.ContainsAny(s, "\n\r\x00") }

func oneLine(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ", "\x00", "").Replace(s)
}

func nodeName(getenv func(string) string) string {
	if n := getenv("SLURMD_NODENAME"); n != "" {
		return n
	}
	return "this node"
}
