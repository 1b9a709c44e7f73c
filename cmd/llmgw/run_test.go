package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// llmgwRun runs `llmgw args...` in-process with environ as its whole
// environment, and returns the exit status and both streams.
func llmgwRun(t *testing.T, environ map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return environ[k] }}
	code := run(context.Background(), args, e)
	return code, out.String(), errb.String()
}
