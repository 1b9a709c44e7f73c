package main

import (
	"os/exec"
	"strings"
	"testing"
)

// heavy are the packages the hook binary must not link. Go runs the init
// of every linked package on every start, and this program starts on every
// job: net/http alone costs about a millisecond, prometheus more, and the
// fetcher pulls both; the TOML decoder and the flag parser cost a third of
// a millisecond. The full llmgw binary has them all.
var heavy = []string{
	"net/http",
	"github.com/sirupsen/logrus",
	"github.com/prometheus/",
	"github.com/mattn/go-sqlite3",
	"github.com/BurntSushi/toml",          // the hook reads the resolved copy, not agent.toml
	"github.com/spf13/pflag",              // and takes no flags of its own (it hands them to llmgw)
	"github.com/llmgw/llmgw/agent/config", // the loader: toml and pflag
	"github.com/llmgw/llmgw/weights",      // the fetcher and the scanner (weights/catalog is fine)
	"github.com/llmgw/llmgw/api",          // net/http
	"github.com/llmgw/llmgw/agent",        // the agent itself (agent/config is fine)
	"github.com/llmgw/llmgw/prolog/full",  // the slow path
	"github.com/llmgw/llmgw/slurm",        // the runner: os/exec and friends
	"net",                                 // each of these three inits on every start,
	"regexp",                              // and nothing on the fast path needs them
	"os/exec",
}

// allowed are packages under a heavy prefix that are light on purpose.
var allowed = map[string]bool{
	"github.com/llmgw/llmgw/weights/catalog": true,
	"github.com/llmgw/llmgw/agent/nodeconf":  true,
}

func TestHookDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, d := range deps {
		if allowed[d] {
			continue
		}
		for _, h := range heavy {
			if d == h || strings.HasPrefix(d, strings.TrimSuffix(h, "/")+"/") {
				t.Errorf("llmgw-hook links %s: it starts on every job and must stay small; move what needs it to the slow path (package prolog/full, in llmgw)", d)
			}
		}
	}
	t.Logf("llmgw-hook links %d packages", len(deps))
}
