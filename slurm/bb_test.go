package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBurstBufferScript runs slurm/bb/burst_buffer.lua as slurmctld would,
// with a stand-in llmgw that answers from a file: from 23.02
// (slurm_bb_test_data_in with job_info) it answers BUSY while llmgw says
// wait and SUCCESS once it says ready, passing the planned nodes; on 22.05
// (slurm_bb_data_in without job_info) it waits in data_in until llmgw says
// ready. Its settings file is read at every question: Slurm keeps the
// script loaded, and a changed coordinator must be used at once.
func TestBurstBufferScript(t *testing.T) {
	lua51(t)
	dir := t.TempDir()
	script, err := filepath.Abs("bb/burst_buffer.lua")
	if err != nil {
		t.Fatal(err)
	}
	// The script finds its settings beside itself: a copy in dir.
	body, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "burst_buffer.lua"), body, 0o644)
	answer := filepath.Join(dir, "answer")
	calls := filepath.Join(dir, "calls")
	fake := filepath.Join(dir, "llmgw")
	os.WriteFile(fake, []byte(fmt.Sprintf("#!/bin/sh\necho \"$@\" >>%s\nhead -n1 %s\n# the next answer\ntail -n +2 %s >%s.next; mv %s.next %s\n", calls, answer, answer, answer, answer, answer)), 0o755)
	conf := fmt.Sprintf("llmgw = %s\npoll = 1\n", fake)
	os.WriteFile(filepath.Join(dir, "llmgw-warm.conf"), []byte(conf), 0o644)

	run := func(answers, driver string) string {
		t.Helper()
		os.WriteFile(answer, []byte(answers), 0o644)
		os.Remove(calls)
		return runLua(t, `slurm = { SUCCESS = 0, ERROR = -1, SLURM_BB_BUSY = "BUSY" }
function slurm.log_info(fmt, ...) io.stderr:write(string.format(fmt, ...), "\n") end
dofile(`+luaString(filepath.Join(dir, "burst_buffer.lua"))+`)
`+driver)
	}
	// 23.02 and later.
	out := run("wait: n3 lacks m\nready: every planned node holds m\n", `
local job_info = { sched_nodes = "n[3-4]", start_time = 0 }
assert(slurm_bb_data_in("12", "/s", "1000", "1000", job_info) == 0)
for i = 1, 2 do
	local rc, busy = slurm_bb_test_data_in("12", "/s", "1000", "1000", job_info)
	io.write(rc, " ", tostring(busy), "\n")
end
`)
	if out != "0 BUSY\n0 nil\n" {
		t.Errorf("test_data_in answered %q; want BUSY while llmgw says wait, then SUCCESS", out)
	}
	c, _ := os.ReadFile(calls)
	if !strings.Contains(string(c), "warm 12 --nodes n[3-4]") {
		t.Errorf("llmgw was run as %q; want warm JOB with the planned nodes", c)
	}
	// A coordinator named later, while the script stays loaded, is used
	// at the next question.
	run("ready: x\nready: y\n", `slurm_bb_test_data_in("13", "/s", "1000", "1000", {})
local f = io.open(`+luaString(filepath.Join(dir, "llmgw-warm.conf"))+`, "w")
f:write(`+luaString(conf+"coordinator = http://127.0.0.1:8420\n")+`)
f:close()
slurm_bb_test_data_in("13", "/s", "1000", "1000", {})`)
	if c, _ := os.ReadFile(calls); !strings.Contains(string(c), "--coordinator http://127.0.0.1:8420") {
		t.Errorf("after the settings changed llmgw was run as %q; want the new coordinator", c)
	}
	// 22.05: data_in waits itself.
	out = run("wait: a\nwait: b\nready: c\n", `
local rc = slurm_bb_data_in("14", "/s")
io.write(rc, "\n")
`)
	c, _ = os.ReadFile(calls)
	if out != "0\n" || strings.Count(string(c), "warm 14") != 3 {
		t.Errorf("22.05's data_in: %q after %q; want SUCCESS after three questions", out, c)
	}
	// Whatever llmgw prints that is not "wait:" lets the job go.
	out = run("garbage\n", `io.write(select(2, slurm_bb_test_data_in("15", "/s", "1000", "1000", {})) == nil and "go" or "held", "\n")`)
	if out != "go\n" {
		t.Errorf("an answer that is not wait held the job: %q", out)
	}
	// Any other hook is a no-op that succeeds.
	out = run("", `io.write(slurm_bb_job_process("/s"), slurm_bb_pools(), slurm_bb_paths("1", "/s", "/p"), slurm_bb_job_teardown("1", "/s", "false"), "\n")`)
	if out != "0000\n" {
		t.Errorf("the other hooks: %q; want SUCCESS from each", out)
	}
	// A token file and a munge socket reach llmgw.
	os.WriteFile(filepath.Join(dir, "llmgw-warm.conf"), []byte(conf+"token_file = /etc/llmgw/read.token\nmunge_socket = /var/run/m.sock\n"), 0o644)
	os.WriteFile(fake, []byte(fmt.Sprintf("#!/bin/sh\necho \"$LLMGW_MUNGE_SOCKET $@\" >>%s\necho ready\n", calls)), 0o755)
	run("", `slurm_bb_test_data_in("16", "/s", "1000", "1000", {})`)
	if c, _ := os.ReadFile(calls); !strings.Contains(string(c), "/var/run/m.sock warm 16 --token-file /etc/llmgw/read.token") {
		t.Errorf("llmgw was run as %q; want LLMGW_MUNGE_SOCKET set and --token-file", c)
	}
}
