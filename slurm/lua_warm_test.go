package slurm

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestLuaJobSubmitWarm: a job naming a model that asks to wait for its
// weights (--llmgw-warm, or llmgw:warm in its comment) gets llmgw's
// burst-buffer directive beside any of its own, and the note the
// prefetcher reads; a job that does not ask, or names no model, gets
// neither.
func TestLuaJobSubmitWarm(t *testing.T) {
	features := filepath.Join(t.TempDir(), "features")
	for _, c := range []struct {
		name, job, bb string
		warm          bool
	}{
		{"spank option", `{spank_job_env={[0]="_SLURM_SPANK_OPTION_llmgw_llmgw_model=m1", [1]="_SLURM_SPANK_OPTION_llmgw_llmgw_warm=", [2]="LLMGW_WARM=1"}, user_id=1000}`, "#BB_LUA llmgw-warm", true},
		{"comment", `{comment="llmgw:model=m1 llmgw:warm", user_id=1000}`, "#BB_LUA llmgw-warm", true},
		{"beside the job's own", `{comment="llmgw:model=m1 llmgw:warm", burst_buffer="#BB_LUA capacity=1G", user_id=1000}`, "#BB_LUA capacity=1G\n#BB_LUA llmgw-warm", true},
		{"not asked", `{comment="llmgw:model=m1", user_id=1000}`, "", false},
		{"no model", `{comment="llmgw:warm", user_id=1000}`, "", false},
		{"a word that only starts like it", `{comment="llmgw:model=m1 llmgw:warmer", user_id=1000}`, "", false},
		// burst_buffer/lua rejects root's burst buffers: root's job is
		// left alone rather than rejected.
		{"root", `{comment="llmgw:model=m1 llmgw:warm", user_id=0}`, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			script := luaPrelude + fmt.Sprintf(`
dofile(%s)
local job = %s
slurm_job_submit(job, {}, 1000)
io.write(job.burst_buffer or "", "|", job.admin_comment or "", "\n")
`, absLua(t, jobSubmitLua), c.job)
			out := strings.TrimSuffix(runLua(t, script, "LLMGW_FEATURE_FILE="+features, scriptEnv(t)), "\n")
			bb, admin, _ := strings.Cut(out, "|")
			if bb != c.bb {
				t.Errorf("burst_buffer = %q; want %q", bb, c.bb)
			}
			if m, warm := ModelOf("", admin); warm != c.warm || (c.warm && m != "m1") {
				t.Errorf("admin comment %q reads as model %q, warm %v; want warm %v", admin, m, warm, c.warm)
			}
		})
	}
}
