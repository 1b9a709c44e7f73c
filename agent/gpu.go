package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/slurm"
)

// gpuQuery is what the agent asks nvidia-smi: each GPU's total memory, one
// line per GPU, in MiB without a header or units.
var gpuQuery = []string{"--query-gpu=memory.total", "--format=csv,noheader,nounits"}

// gpuTimeout bounds nvidia-smi. It answers in well under a second on a
// healthy node; a driver that hangs must not hold up the report.
const gpuTimeout = 10 * time.Second

// ParseGPUMemory reads the output of
// `nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits` and
// returns the node's total GPU memory in bytes, all GPUs together: a model
// too big for one GPU is split across a node's GPUs, so the node's total is
// what the memory check compares. It does no I/O.
func ParseGPUMemory(out []byte) (int64, error) {
	var total int64
	gpus := 0
	for i, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		mib, err := strconv.ParseInt(line, 10, 64)
		if err != nil || mib <= 0 || mib > 1<<30 {
			return 0, fmt.Errorf("nvidia-smi line %d %q: want the GPU's memory in MiB", i+1, line)
		}
		total += mib << 20
		gpus++
	}
	if gpus == 0 {
		return 0, errors.New("nvidia-smi listed no GPU")
	}
	return total, nil
}

// probeGPUMemory asks the nvidia-smi at path for the GPU memory. A node
// without it has no NVIDIA GPU tools: its GPU memory is unknown (0), which
// is not an error. It runs through slurm.Runner, which gives every
// subprocess llmgw starts an absolute path, an argument vector and a
// timeout.
func probeGPUMemory(ctx context.Context, path string) (int64, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	r := slurm.Runner{Dir: filepath.Dir(path), Timeout: gpuTimeout}
	out, err := r.Run(ctx, filepath.Base(path), gpuQuery...)
	if err != nil {
		return 0, fmt.Errorf("GPU memory: %w; set gpu_memory in the agent's config", err)
	}
	b, err := ParseGPUMemory(out)
	if err != nil {
		return 0, fmt.Errorf("GPU memory: %w; set gpu_memory in the agent's config", err)
	}
	return b, nil
}

// gpuProbe remembers what nvidia-smi said, per binary: GPU memory does not
// change while a node runs, and nvidia-smi is slow to start.
type gpuProbe struct {
	path  string
	bytes int64
	done  bool
}

// gpuMemory is the node's GPU memory for cfg: the configured figure, else
// nvidia-smi's (asked once per binary), else 0 for unknown. A failure is
// kept among the errors the next report carries.
func (a *Agent) gpuMemory(cfg Config) int64 {
	if cfg.GPUMemory > 0 {
		return cfg.GPUMemory
	}
	a.mu.Lock()
	g := a.gpu
	a.mu.Unlock()
	if g.done && g.path == cfg.NvidiaSMI {
		return g.bytes
	}
	b, err := probeGPUMemory(context.Background(), cfg.NvidiaSMI)
	if err != nil {
		a.log.WithError(err).Warn("the node's GPU memory is unknown; placement skips the memory check here")
		a.recordError(err.Error())
	}
	a.mu.Lock()
	a.gpu = gpuProbe{path: cfg.NvidiaSMI, bytes: b, done: true}
	a.mu.Unlock()
	return b
}
