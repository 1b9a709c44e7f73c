package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseGPUMemory(t *testing.T) {
	// Eight 80 GB GPUs, as `nvidia-smi --query-gpu=memory.total
	// --format=csv,noheader,nounits` lists them: one MiB figure per line.
	out, err := os.ReadFile("testdata/nvidia-smi-memory-total-8gpu.csv")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseGPUMemory(out); err != nil || got != 8*81559<<20 {
		t.Errorf("8 GPUs: %d, %v; want %d", got, err, int64(8*81559)<<20)
	}
	for in, want := range map[string]int64{"24576\n": 24576 << 20, " 16384 \r\n\n 16384\n": 32768 << 20} {
		if got, err := ParseGPUMemory([]byte(in)); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "\n", "[N/A]\n", "81559 MiB\n", "memory.total [MiB]\n81559\n", "-1\n", "0\n"} {
		if got, err := ParseGPUMemory([]byte(in)); err == nil {
			t.Errorf("%q: %d, want an error", in, got)
		}
	}
}

// fakeNvidiaSMI writes a script that checks it was asked the query llmgw
// asks and prints out (or fails with code).
func fakeNvidiaSMI(t *testing.T, out string, code int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nvidia-smi")
	script := "#!/bin/sh\n[ \"$*\" = \"" + strings.Join(gpuQuery, " ") + "\" ] || { echo \"bad args: $*\" >&2; exit 9; }\n" +
		"printf '" + out + "'\nexit " + string(rune('0'+code)) + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProbeGPUMemory(t *testing.T) {
	ctx := context.Background()
	if got, err := probeGPUMemory(ctx, filepath.Join(t.TempDir(), "nvidia-smi")); got != 0 || err != nil {
		t.Errorf("no nvidia-smi: %d, %v; want unknown, no error", got, err)
	}
	if got, err := probeGPUMemory(ctx, fakeNvidiaSMI(t, `40960\n40960\n`, 0)); got != 81920<<20 || err != nil {
		t.Errorf("two GPUs: %d, %v", got, err)
	}
	_, err := probeGPUMemory(ctx, fakeNvidiaSMI(t, `No devices were found\n`, 6))
	if err == nil || !strings.Contains(err.Error(), "set gpu_memory") {
		t.Errorf("failing nvidia-smi: %v; want an error saying what to do", err)
	}
}
