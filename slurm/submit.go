package slurm

import (
	"bytes"
	"context"
	"io"
	"strings"
)

// Args are the sbatch options c adds, in the form sbatch takes them. With
// withPrefer false the preference is left out: the retry after Slurm refused
// it.
func (c Composition) Args(withPrefer bool) []string {
	var a []string
	if withPrefer && c.Prefer != "" {
		a = append(a, "--prefer="+c.Prefer)
	}
	if len(c.Exclude) > 0 {
		a = append(a, "--exclude="+Compress(c.Exclude))
	}
	if c.Comment != "" {
		a = append(a, "--comment="+c.Comment)
	}
	if c.SpankModel != "" {
		a = append(a, "--llmgw-model="+c.SpankModel)
	}
	return a
}

// Submission is one sbatch call: the user's arguments and what llmgw adds.
type Submission struct {
	// Args are the user's sbatch arguments (rest from ParseSbatchArgs), and
	// Script the index of the batch script in them, or -1.
	Args   []string
	Script int
	// Added is inserted before the script: sbatch lets a later option
	// override an earlier one, and Added already holds the user's own
	// constraint, preference, exclusions and comment.
	Added Composition
	// Stdin is the batch script when it came on stdin (nil: none).
	Stdin []byte
}

// Argv is the whole sbatch argument vector, with or without the preference.
func (s Submission) Argv(withPrefer bool) []string {
	at := s.Script
	if at < 0 {
		at = len(s.Args)
	}
	argv := append([]string{}, s.Args[:at]...)
	argv = append(argv, s.Added.Args(withPrefer)...)
	return append(argv, s.Args[at:]...)
}

// Submit runs sbatch for s, its stdout streamed to stdout and its stderr
// to stderr, and returns sbatch's exit status. When Slurm refuses the job
// for its preference (PreferRejected), which it may when the features
// changed since they were read, the refusal is not shown: onRetry is told
// Slurm's message and the job is submitted again without the preference.
// A preference must never cost a job.
func (r *Runner) Submit(ctx context.Context, s Submission, stdout, stderr io.Writer, onRetry func(refusal string)) (int, error) {
	stdin := func() io.Reader {
		if s.Stdin == nil {
			return nil
		}
		return bytes.NewReader(s.Stdin)
	}
	if s.Added.Prefer == "" {
		return r.Pipe(ctx, stdin(), stdout, stderr, "sbatch", s.Argv(false)...)
	}
	var errBuf bytes.Buffer
	status, err := r.Pipe(ctx, stdin(), stdout, &errBuf, "sbatch", s.Argv(true)...)
	if err != nil || status == 0 || !PreferRejected(errBuf.String()) {
		_, _ = stderr.Write(errBuf.Bytes())
		return status, err
	}
	if onRetry != nil {
		onRetry(strings.TrimSpace(errBuf.String()))
	}
	return r.Pipe(ctx, stdin(), stdout, stderr, "sbatch", s.Argv(false)...)
}
