package slurm

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// jobSubmitLua is the script slurmctld runs for a site without one of its
// own, and submitModule the module it (or a site's script) loads; the tests
// run them with the same Lua (5.1) that Debian's job_submit/lua plugin links.
const (
	jobSubmitLua = "lua/job_submit.lua"
	submitModule = "lua/llmgw_submit.lua"
)

// submitParts are the files the module loads from beside itself.
var submitParts = []string{"lua/llmgw_compose.lua", "lua/llmgw_features.lua"}

// absLua is a Lua file of the tree by absolute path, as a Lua string.
func absLua(t *testing.T, rel string) string {
	t.Helper()
	return luaString(luaFile(t, rel))
}

// luaFile is a Lua file of the tree by absolute path. It is stat'ed here,
// in the test's process, so that go test's cache knows the result depends
// on it: lua5.1 reads it in a process of its own, which the cache does not
// see, and an edit of the Lua alone would otherwise be answered (cached).
func luaFile(t *testing.T, rel string) string {
	t.Helper()
	abs, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatal(err)
	}
	return abs
}

// scriptEnv points job_submit.lua at this tree's module, as scripts/dev-cluster
// points slurmctld at it.
func scriptEnv(t *testing.T) string {
	t.Helper()
	return "LLMGW_SUBMIT_MODULE=" + luaFile(t, submitModule)
}

func lua51(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("lua5.1")
	if err != nil {
		t.Skip("lua5.1 is not installed (apt-get install lua5.1; scripts/dev-cluster installs it)")
	}
	return p
}

// luaString quotes s as a Lua 5.1 string literal: Lua has no \x or \u
// escapes, so everything outside printable ASCII is written as \ddd.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func luaList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = luaString(s)
	}
	return "{" + strings.Join(q, ", ") + "}"
}

// luaInput writes in as the table llmgw.compose takes.
func luaInput(in ComposeInput) string {
	var nodes []string
	for _, nd := range in.Cluster {
		nodes = append(nodes, fmt.Sprintf("{name=%s, partitions=%s, features=%s}", luaString(nd.Name), luaList(nd.Partitions), luaList(nd.Features)))
	}
	return fmt.Sprintf("{model=%s, constraint=%s, prefer=%s, nodes=%d, exclude=%s, nodelist=%t, comment=%s, partitions=%s, cluster={%s}, complete=%t, no_room=%s, spank=%t, composed=%t}",
		luaString(in.Model), luaString(in.Constraint), luaString(in.Prefer), in.Nodes, luaList(in.Exclude), in.NodeList,
		luaString(in.Comment), luaList(in.Partitions), strings.Join(nodes, ", "), in.Complete, luaList(in.NoRoom), in.Spank, in.Composed)
}

// luaPrelude stands in for what slurmctld gives the script: the slurm table.
const luaPrelude = `
slurm = { SUCCESS = 0, ERROR = -1 }
function slurm.log_info(fmt, ...) io.stderr:write("info: ", string.format(fmt, ...), "\n") end
function slurm.log_error(fmt, ...) io.stderr:write("error: ", string.format(fmt, ...), "\n") end
`

func runLua(t *testing.T, script string, env ...string) string {
	t.Helper()
	lua := lua51(t)
	path := filepath.Join(t.TempDir(), "driver.lua")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lua, path)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lua5.1: %v\n%s", err, stderr.String())
	}
	t.Logf("lua stderr:\n%s", stderr.String())
	return string(out)
}

// luaCompose runs the module's compose on each input, in one lua5.1
// process, and returns one composeLine per input.
func luaCompose(t *testing.T, inputs []ComposeInput) []string {
	t.Helper()
	var b strings.Builder
	b.WriteString(luaPrelude)
	fmt.Fprintf(&b, "local llmgw = dofile(%s)\nlocal cases = {\n", absLua(t, submitModule))
	for _, in := range inputs {
		fmt.Fprintf(&b, "  %s,\n", luaInput(in))
	}
	b.WriteString(`}
for _, in_ in ipairs(cases) do
	local r = llmgw.compose(in_)
	io.write(r.prefer or "", "\t", table.concat(r.exclude or {}, ","), "\t", r.comment or "", "\t", r.spank_model or "", "\t", r.holders or 0, "\n")
end
`)
	lines := strings.Split(strings.TrimSuffix(runLua(t, b.String()), "\n"), "\n")
	if len(lines) != len(inputs) {
		t.Fatalf("lua printed %d results for %d inputs", len(lines), len(inputs))
	}
	return lines
}

// composeLine is a Composition as luaCompose's script prints one.
func composeLine(c Composition) string {
	return strings.Join([]string{c.Prefer, strings.Join(c.Exclude, ","), c.Comment, c.SpankModel, strconv.Itoa(c.Holders)}, "\t")
}

// TestLuaComposeMatchesGo runs job_submit.lua's compose on every case of
// testdata/compose/cases.json and checks it answers as the table (and so
// Compose) does: the two are one composition in two languages.
func TestLuaComposeMatchesGo(t *testing.T) {
	cs := loadComposeCases(t)
	inputs := make([]ComposeInput, len(cs.Cases))
	for i, c := range cs.Cases {
		inputs[i] = c.input(cs)
	}
	lines := luaCompose(t, inputs)
	for i, c := range cs.Cases {
		if want := composeLine(c.Want); lines[i] != want {
			t.Errorf("%s:\n lua  %q\n want %q", c.Name, lines[i], want)
		}
	}
}

// TestLuaJobSubmit runs slurm_job_submit as slurmctld would, on job
// descriptions shaped like 22.05's, with a feature file written here.
func TestLuaJobSubmit(t *testing.T) {
	dir := t.TempDir()
	features := filepath.Join(dir, "features")
	if err := os.WriteFile(features, []byte(`# llmgw features (generated by the coordinator; do not edit) synced=1005 interval=30 features=all
n1 debug,p12 ib-a
n2 debug,p12 ib-a,llmgw.m1
n3 debug ib-b,llmgw.m3
n4 debug ib-b,llmgw.m2,llmgw.m3
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// An older coordinator's file: llmgw's features only, no features=all.
	older := filepath.Join(dir, "features.older")
	if err := os.WriteFile(older, []byte(`# llmgw features (generated by the coordinator; do not edit) synced=1005 interval=30
n1 debug,p12 -
n2 debug,p12 llmgw.m1
n3 debug llmgw.m3
n4 debug llmgw.m2,llmgw.m3
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// 22.05 passes the partitions keyed by name (slurm_lua_push_partition_list),
	// each with its record's pointer in the metatable.
	parts := `{ debug = setmetatable({name="debug", flag_default=1}, {_part_rec_ptr="debug@1"}),
		p12 = setmetatable({name="p12", flag_default=0}, {_part_rec_ptr="p12@1"}) }`
	cases := []struct {
		name, job string
		features  string // the feature file path (default: the one above)
		want      string // prefer|exc_nodes|comment|admin_comment (a substring for admin_comment)
	}{
		{"spank option", `{spank_job_env={[0]="_SLURM_SPANK_OPTION_llmgw_llmgw_model=m1", [1]="LLMGW_MODEL=m1"}, min_nodes=4294967294}`, "",
			"llmgw.m1|||model m1 (--llmgw-model) in debug: prefer=llmgw.m1"},
		{"comment tag", `{comment="run llmgw:model=m3", min_nodes=3}`, "",
			"llmgw.m3*2||run llmgw:model=m3|model m3 (comment) in debug: prefer=llmgw.m3*2"},
		{"composed by llmgw sbatch", `{comment="llmgw:model=m1 llmgw:composed"}`, "",
			"||llmgw:model=m1 llmgw:composed|composed by llmgw sbatch"},
		{"set by llmgw sbatch already", `{comment="llmgw:model=m1", prefer="(ib-a)&llmgw.m1"}`, "",
			"(ib-a)&llmgw.m1||llmgw:model=m1|preference already set"},
		{"partition without holder", `{comment="llmgw:model=m2", partition="p12"}`, "",
			"||llmgw:model=m2|no node in the job's partition holds m2"},
		{"constraint met by a holder", `{comment="llmgw:model=m1", features="ib-a"}`, "",
			"(ib-a)&llmgw.m1||llmgw:model=m1|prefer=(ib-a)&llmgw.m1"},
		{"constraint met by no holder", `{comment="llmgw:model=m1", features="ib-b"}`, "",
			"||llmgw:model=m1|no node in the job's partition holds m1"},
		{"two nodes in the fabric of one holder", `{comment="llmgw:model=m2", features="ib-b", min_nodes=2}`, "",
			"[(ib-b&llmgw.m2)*1&ib-b*1]||llmgw:model=m2|prefer=[(ib-b&llmgw.m2)*1&ib-b*1]"},
		{"constraint names a feature no node has", `{comment="llmgw:model=m1", features="gpu&ib-a"}`, "",
			"||llmgw:model=m1|no node in the job's partition holds m1"},
		{"older file: constraint cannot be checked", `{comment="llmgw:model=m1", features="ib-a"}`, older,
			"||llmgw:model=m1|names ib-a, and the feature file lists only llmgw's features"},
		{"older file: llmgw's own features still work", `{comment="llmgw:model=m1"}`, older,
			"llmgw.m1||llmgw:model=m1|prefer=llmgw.m1"},
		{"no model: untouched", `{comment="hello"}`, "", "||hello|"},
		{"invalid model name", `{comment="llmgw:model=a/b"}`, "", "||llmgw:model=a/b|not a valid model name"},
		{"feature file missing", `{comment="llmgw:model=m1"}`, filepath.Join(dir, "nope"), "||llmgw:model=m1|feature file"},
		{"user exclude honoured", `{comment="llmgw:model=m1", exc_nodes="n[1-2]"}`, "", "|n[1-2]|llmgw:model=m1|no node in the job's partition"},
		{"garbage in the request is not a rejection", `{comment="llmgw:model=m1", features={}}`, "", "||llmgw:model=m1|error, nothing added"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ff := features
			if c.features != "" {
				ff = c.features
			}
			// A first submission at 1000 lets the script see slurmctld's
			// tables; the file was synced after it (1005), and the job comes
			// at 1010.
			script := luaPrelude + fmt.Sprintf(`
local clock = 1000
os.time = function() return clock end
dofile(%s)
local parts = %s
slurm_job_submit({comment="first"}, parts, 1000)
clock = 1010
local job = %s
local rc = slurm_job_submit(job, parts, 1000)
io.write(rc, "\n", job.prefer or "", "|", job.exc_nodes or "", "|", tostring(job.comment or ""), "|", job.admin_comment or "", "\n")
`, absLua(t, jobSubmitLua), parts, c.job)
			out := runLua(t, script, "LLMGW_FEATURE_FILE="+ff, scriptEnv(t))
			rc, got, _ := strings.Cut(strings.TrimSuffix(out, "\n"), "\n")
			if rc != "0" {
				t.Errorf("slurm_job_submit returned %s, want slurm.SUCCESS (0): llmgw never rejects a job", rc)
			}
			wantHead, wantAdmin := c.want[:strings.LastIndex(c.want, "|")], c.want[strings.LastIndex(c.want, "|")+1:]
			gotHead, gotAdmin := got[:strings.LastIndex(got, "|")], got[strings.LastIndex(got, "|")+1:]
			if gotHead != wantHead || !strings.Contains(gotAdmin, wantAdmin) || (wantAdmin == "" && gotAdmin != "") {
				t.Errorf("job after submit: %q, want %q (admin comment containing %q)", got, wantHead, wantAdmin)
			}
		})
	}
}

// TestLuaJobSubmitFreshness runs one Lua state, as slurmctld keeps one,
// through a sequence of submissions while the clock, the feature file's
// header and slurmctld's partition records change: a preference only from a
// file synced after the last rebuild the script saw, and not over two
// intervals old. Each rewrite of the file comes in a second of its own: the
// module looks at the file at most once a second (llmgw.features).
func TestLuaJobSubmitFreshness(t *testing.T) {
	features := filepath.Join(t.TempDir(), "features")
	const body = "n1 debug -\nn2 debug llmgw.m1\n"
	type step struct {
		name   string
		clock  int64
		header string // after the header's fixed text
		gen    string // the partition records' generation: "" for records without a pointer
		job    string // the job's comment
		want   string // the preference, or a substring of AdminComment when none
		nodes  int    // the job's min_nodes; 0 leaves it unset
	}
	steps := []step{
		{"first submission after the load", 1000, " synced=999 interval=30", "1", "llmgw:model=m1", "rebuilt its tables (scontrol reconfigure, a restart or a new script) at 1000, and the feature file was last synced at 999", 0},
		{"a sync in the same second is not after", 1001, " synced=1000 interval=30", "1", "llmgw:model=m1", "last synced at 1000 (1 s ago), not after", 0},
		{"a sync after it", 1002, " synced=1001 interval=30", "1", "llmgw:model=m1", "prefer=llmgw.m1", 0},
		{"scontrol reconfigure: new records", 1010, " synced=1001 interval=30", "2", "llmgw:model=m1", "at 1010, and the feature file was last synced at 1001", 0},
		{"a sync between the rebuild and its sighting is not trusted", 1011, " synced=1005 interval=30", "2", "llmgw:model=m1", "at 1010", 0},
		{"the next sync", 1012, " synced=1011 interval=30", "2", "llmgw:model=m1", "prefer=llmgw.m1", 0},
		{"over two intervals old", 1100, " synced=1011 interval=30", "2", "llmgw:model=m1", "last synced 89 s ago, over twice the coordinator's interval of 30 s", 0},
		{"a fractional interval", 1101, " synced=1097 interval=1.5", "2", "llmgw:model=m1", "last synced 4 s ago, over twice the coordinator's interval of 1.5 s", 0},
		{"a header without the sync time", 1102, "", "2", "llmgw:model=m1", "has no synced= and interval=", 0},
		{"records without pointers teach nothing", 1103, " synced=1101 interval=30", "", "llmgw:model=m1", "prefer=llmgw.m1", 0},
		{"a job without a model sees a rebuild too", 1200, " synced=1199 interval=30", "3", "hello", "", 0},
		{"so the next has to wait", 1201, " synced=1200 interval=30", "3", "llmgw:model=m1", "at 1200, and the feature file was last synced at 1200", 0},
		{"and the sync after takes it", 1202, " synced=1201 interval=30", "3", "llmgw:model=m1", "prefer=llmgw.m1", 0},
		// slurmctld was down long enough for the file to be stale as well:
		// the rebuild is named, with the file's age.
		{"a restart with a stale file names the restart", 1300, " synced=1201 interval=30", "4", "llmgw:model=m1", "at 1300, and the feature file was last synced at 1201 (99 s ago), not after", 0},
		// Under ignore_prefer_validation (prefer=fallback) a file that is
		// only old still serves a single-node job: Slurm falls back by
		// itself if the node lost the feature meanwhile.
		{"ignore_prefer_validation: an old file serves a single-node job", 1400, " synced=1301 interval=30 prefer=fallback", "4", "llmgw:model=m1", "prefer=llmgw.m1", 1},
		{"but not a 2-node job, which 24.11 would park", 1401, " synced=1301 interval=30 prefer=fallback", "4", "llmgw:model=m1", "last synced 100 s ago", 2},
		{"nor anything after a rebuild, which may have turned it off", 1500, " synced=1301 interval=30 prefer=fallback", "5", "llmgw:model=m1", "at 1500, and the feature file was last synced at 1301", 1},
		// Within one second the gate's answer is kept (llmgw_submit.lua,
		// gate), but not past a rebuild seen in that second.
		{"a sync after it", 1502, " synced=1501 interval=30", "5", "llmgw:model=m1", "prefer=llmgw.m1", 0},
		{"a rebuild seen by a job without a model, in the same second", 1502, " synced=1501 interval=30", "6", "hello", "", 0},
		{"takes the gate's answer of that second back", 1502, " synced=1501 interval=30", "6", "llmgw:model=m1", "at 1502, and the feature file was last synced at 1501", 0},
	}
	var b strings.Builder
	b.WriteString(luaPrelude)
	fmt.Fprintf(&b, "local clock\nos.time = function() return clock end\ndofile(%s)\n", absLua(t, jobSubmitLua))
	b.WriteString(`local function parts(gen)
	if gen == "" then
		return { debug = {name="debug", flag_default=1} }
	end
	return { debug = setmetatable({name="debug", flag_default=1}, {_part_rec_ptr="debug@" .. gen}) }
end
local function step(at, header, gen, comment, nodes)
	clock = at
	local f = assert(io.open(os.getenv("LLMGW_FEATURE_FILE"), "w"))
	f:write("# llmgw features (generated by the coordinator; do not edit)", header, "\n", ` + luaString(body) + `)
	f:close()
	local job = {comment=comment, min_nodes=nodes}
	local rc = slurm_job_submit(job, parts(gen), 1000)
	io.write(rc, "|", job.prefer or "", "|", job.admin_comment or "", "\n")
end
`)
	for _, s := range steps {
		nodes := "nil"
		if s.nodes > 0 {
			nodes = fmt.Sprint(s.nodes)
		}
		fmt.Fprintf(&b, "step(%d, %s, %s, %s, %s)\n", s.clock, luaString(s.header), luaString(s.gen), luaString(s.job), nodes)
	}
	out := strings.Split(strings.TrimSuffix(runLua(t, b.String(), "LLMGW_FEATURE_FILE="+features, scriptEnv(t)), "\n"), "\n")
	if len(out) != len(steps) {
		t.Fatalf("lua printed %d lines for %d steps:\n%s", len(out), len(steps), strings.Join(out, "\n"))
	}
	for i, s := range steps {
		f := strings.SplitN(out[i], "|", 3)
		rc, prefer, admin := f[0], f[1], f[2]
		switch {
		case rc != "0":
			t.Errorf("%s: slurm_job_submit returned %s, want slurm.SUCCESS", s.name, rc)
		case s.job == "hello":
			if prefer != "" || admin != "" {
				t.Errorf("%s: a job without a model got prefer %q, AdminComment %q", s.name, prefer, admin)
			}
		case strings.HasPrefix(s.want, "prefer="):
			if "prefer="+prefer != s.want || !strings.Contains(admin, s.want) ||
				strings.Contains(s.header, "fallback") && !strings.Contains(admin, "a single-node job falls back by itself") {
				t.Errorf("%s: prefer %q, AdminComment %q; want %s", s.name, prefer, admin, s.want)
			}
		default:
			if prefer != "" || !strings.Contains(admin, "no preference: ") || !strings.Contains(admin, s.want) {
				t.Errorf("%s: prefer %q, AdminComment %q; want no preference, and why: %q", s.name, prefer, admin, s.want)
			}
		}
	}

	// A Slurm that shows no partition records cannot tell a reconfigure:
	// no preference ever.
	out1 := runLua(t, luaPrelude+fmt.Sprintf(`dofile(%s)
local job = {comment="llmgw:model=m1"}
slurm_job_submit({comment="first"}, { debug = {name="debug", flag_default=1} }, 0)
slurm_job_submit(job, { debug = {name="debug", flag_default=1} }, 0)
io.write(job.prefer or "", "|", job.admin_comment or "")
`, absLua(t, jobSubmitLua)), "LLMGW_FEATURE_FILE="+features, scriptEnv(t))
	if !strings.HasPrefix(out1, "|") || !strings.Contains(out1, "partition records are not visible") {
		t.Errorf("without partition pointers: %q; want no preference, and why", out1)
	}
}

// randomInputs generates n compose inputs, well-formed and not, from rng:
// each with a cluster of its own, or all on cluster when it is not nil.
func randomInputs(rng *rand.Rand, n int, cluster []FeatureNode) []ComposeInput {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	var expr func(depth int) string
	expr = func(depth int) string {
		switch r := rng.IntN(10); {
		case r < 4 || depth > 2:
			return pick("ib-a", "ib-b", "llmgw.m1", "llmgw.m2", "gpu", "x*2", "")
		case r < 6:
			return expr(depth+1) + pick("&", "|") + expr(depth+1)
		case r < 8:
			return "(" + expr(depth+1) + ")"
		default:
			return "[" + expr(depth+1) + pick("|", "&", "]") + expr(depth+1) + "]"
		}
	}
	nodesNamed := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	subset := func(from []string) []string {
		var out []string
		for _, s := range from {
			if rng.IntN(3) == 0 {
				out = append(out, s)
			}
		}
		return out
	}
	var inputs []ComposeInput
	for range n {
		in := ComposeInput{
			Prefix:     testPrefix,
			Model:      pick("m1", "m2", "m3"),
			Nodes:      rng.IntN(5),
			Partitions: subset([]string{"debug", "p2"}),
			Exclude:    subset(nodesNamed),
			NoRoom:     subset(nodesNamed),
			NodeList:   rng.IntN(20) == 0,
			Spank:      rng.IntN(2) == 0,
			Composed:   rng.IntN(2) == 0,
			Complete:   rng.IntN(3) != 0,
			Comment:    pick("", "run", "llmgw:model=m1", "a llmgw:composed"),
		}
		if rng.IntN(2) == 0 {
			in.Constraint = expr(0)
		}
		if rng.IntN(4) == 0 {
			in.Prefer = expr(0)
		}
		in.Cluster = cluster
		if cluster == nil {
			for _, n := range nodesNamed[:1+rng.IntN(len(nodesNamed))] {
				in.Cluster = append(in.Cluster, FeatureNode{
					Name:       n,
					Partitions: subset([]string{"debug", "debug", "p2"}),
					Features:   subset([]string{"ib-a", "ib-b", "gpu", "llmgw.m1", "llmgw.m2", "llmgw.m3", "llmgw.m1"}),
				})
			}
		}
		inputs = append(inputs, in)
	}
	return inputs
}

// TestLuaComposeRandomMatchesGo feeds both compositions the same generated
// inputs, well-formed and not, beyond what the table covers, and wants the
// same answer from each: any difference is a job steered differently by
// `llmgw sbatch` and by plain sbatch.
func TestLuaComposeRandomMatchesGo(t *testing.T) {
	inputs := randomInputs(rand.New(rand.NewPCG(8, 2026)), 400, nil)
	lines := luaCompose(t, inputs)
	prefers := 0
	for i, in := range inputs {
		c := Compose(in)
		if want := composeLine(c); lines[i] != want {
			t.Errorf("input %+v:\n lua %q\n go  %q", in, lines[i], want)
		}
		if c.Prefer != "" {
			prefers++
		}
	}
	// The generator must reach the interesting paths, or the test says
	// little.
	if prefers < len(inputs)/10 {
		t.Errorf("only %d of %d generated inputs got a preference; the generator misses the main path", prefers, len(inputs))
	}
	t.Logf("%d inputs, %d with a preference", len(inputs), prefers)
}

// submitCase is a shared compose case as a submission through job_submit:
// the feature file, the job description and the job as it must leave.
type submitCase struct {
	name, file, job string
	want            string // prefer|exc_nodes|comment
	// classed is file as the coordinator writes it, with the nodes'
	// classes (WriteFeatureClasses) before the node lines.
	classed string
}

// classedCases is cases with their files as the coordinator writes them.
func classedCases(cases []submitCase) []submitCase {
	out := make([]submitCase, len(cases))
	for i, c := range cases {
		out[i] = c
		out[i].file = c.classed
	}
	return out
}

// submitCases turns the shared cases into submissions. Cases only llmgw
// sbatch can produce (no room on a node, a job llmgw sbatch composed) or
// that job_submit never composes (an invalid model name, a comment the tag
// would push over Slurm's limit) are left out; the rest are all of them.
func submitCases(t *testing.T) []submitCase {
	t.Helper()
	cs := loadComposeCases(t)
	var out []submitCase
	for i, c := range cs.Cases {
		// A digest per case: each case is a new version of the file.
		if sc, ok := submitCaseOf(c.Name, c.input(cs), c.Want, i+1); ok {
			out = append(out, sc)
		}
	}
	if len(out) < len(cs.Cases)*2/3 {
		t.Fatalf("only %d of %d shared cases apply to job_submit; the conversion lost its way", len(out), len(cs.Cases))
	}
	return out
}

// submitCaseOf is one compose input, and what Compose made of it, as a
// submission through job_submit: the feature file of in's cluster (lines=
// digest version), the job, and the job as it must leave. ok is false for
// an input job_submit never sees or never composes (see submitCases).
func submitCaseOf(name string, in ComposeInput, want Composition, version int) (sc submitCase, ok bool) {
	comment := in.Comment
	if !in.Spank && !strings.Contains(" "+comment+" ", " "+commentTag+in.Model+" ") {
		comment = strings.TrimSpace(comment + " " + commentTag + in.Model)
	}
	if len(in.NoRoom) > 0 || in.Composed || strings.Contains(in.Comment, "llmgw:composed") ||
		!luaValidModel.MatchString(in.Model) || len(comment) > 1024 {
		return sc, false
	}
	// A comment that names another model first names the job's model, for
	// job_submit, and Compose was asked about this one.
	for _, f := range strings.Fields(in.Comment) {
		if m, ok := strings.CutPrefix(f, commentTag); ok && m != "" {
			if !in.Spank && m != in.Model {
				return sc, false
			}
			break
		}
	}
	var file strings.Builder
	all := ""
	if in.Complete {
		all = " features=all"
	}
	// The cases are submitted a second apart (the module looks at the file
	// once a second), so the interval is long enough for them all.
	fmt.Fprintf(&file, "# llmgw features (generated by the coordinator; do not edit) synced=1005 interval=3600%s lines=%016x\n", all, version)
	var lines strings.Builder
	for _, nd := range in.Cluster {
		fmt.Fprintf(&lines, "%s %s %s\n", nd.Name, dashList(nd.Partitions), dashList(nd.Features))
	}
	head := file.String()
	file.WriteString(lines.String())
	var classes strings.Builder
	WriteFeatureClasses(&classes, in.Cluster, "llmgw.")
	job := []string{"comment=" + luaString(comment), "features=" + luaString(in.Constraint), "prefer=" + luaString(in.Prefer),
		"exc_nodes=" + luaString(strings.Join(in.Exclude, ",")), "partition=" + luaString(strings.Join(in.Partitions, ","))}
	if in.Nodes > 0 {
		job = append(job, fmt.Sprintf("min_nodes=%d", in.Nodes))
	}
	if in.NodeList {
		job = append(job, `req_nodes="n1"`)
	}
	if in.Spank {
		job = append(job, fmt.Sprintf("spank_job_env={[0]=%s}", luaString("_SLURM_SPANK_OPTION_llmgw_llmgw_model="+in.Model)))
	}
	// What job_submit leaves alone stays as the user wrote it.
	prefer, exclude, wantComment := want.Prefer, strings.Join(want.Exclude, ","), want.Comment
	if prefer == "" {
		prefer = in.Prefer
	}
	if exclude == "" {
		exclude = strings.Join(in.Exclude, ",")
	}
	if wantComment == "" {
		wantComment = comment
	}
	return submitCase{name, file.String(), "{" + strings.Join(job, ", ") + "}", prefer + "|" + exclude + "|" + wantComment,
		head + classes.String() + lines.String()}, true
}

const commentTag = "llmgw:model="

// luaValidModel is the model-name rule job_submit applies before composing
// (weights/catalog's).
var luaValidModel = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func dashList(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}

// runSubmitCases loads a job_submit script (load, Lua that defines
// slurm_job_submit) in one Lua state, as slurmctld keeps one, submits every
// case through it and returns the jobs as they left: prefer|exc_nodes|comment.
func runSubmitCases(t *testing.T, load string, cases []submitCase) []string {
	t.Helper()
	features := filepath.Join(t.TempDir(), "features")
	var b strings.Builder
	b.WriteString(luaPrelude)
	b.WriteString("local clock = 1000\nos.time = function() return clock end\n")
	b.WriteString(load)
	// The partitions of the cases' clusters, none the default, with their
	// records' pointers; a first submission lets the script see them.
	b.WriteString(`
local parts = {}
for _, p in ipairs({"debug", "p12", "gpu", "p2"}) do
	parts[p] = setmetatable({name=p, flag_default=0}, {_part_rec_ptr=p .. "@1"})
end
slurm_job_submit({comment="first"}, parts, 0)
clock = 1010
local function case(file, job)
	clock = clock + 1
	local f = assert(io.open(os.getenv("LLMGW_FEATURE_FILE"), "w"))
	f:write(file)
	f:close()
	local rc = slurm_job_submit(job, parts, 0)
	io.write(rc, "|", job.prefer or "", "|", job.exc_nodes or "", "|", job.comment or "", "\n")
end
`)
	for _, c := range cases {
		fmt.Fprintf(&b, "case(%s, %s)\n", luaString(c.file), c.job)
	}
	out := strings.Split(strings.TrimSuffix(runLua(t, b.String(), "LLMGW_FEATURE_FILE="+features, scriptEnv(t)), "\n"), "\n")
	if len(out) != len(cases) {
		t.Fatalf("lua printed %d lines for %d cases", len(out), len(cases))
	}
	for i, line := range out {
		rc, rest, _ := strings.Cut(line, "|")
		if rc != "0" {
			t.Errorf("%s: slurm_job_submit returned %s, want slurm.SUCCESS", cases[i].name, rc)
		}
		out[i] = rest
	}
	return out
}

// TestLuaSiteScriptMatchesShipped: a site's own job_submit.lua that calls
// the module, beside checks of its own, gives every shared case the
// composition that the shipped job_submit.lua gives it and that Compose
// gives it: the module is the whole of llmgw's part, whoever calls it.
func TestLuaSiteScriptMatchesShipped(t *testing.T) {
	cases := submitCases(t)
	site := filepath.Join(t.TempDir(), "job_submit.lua")
	if err := os.WriteFile(site, []byte(`-- A site's own script: its own rule first, then llmgw's module.
local llmgw = dofile(`+absLua(t, submitModule)+`)
function slurm_job_submit(job_desc, part_list, submit_uid)
	if job_desc.account == "blocked" then
		return slurm.ERROR
	end
	return llmgw.submit(job_desc, part_list, submit_uid)
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return llmgw.modify(job_desc, job_rec, part_list, modify_uid)
end
`), 0o644); err != nil {
		t.Fatal(err)
	}
	shipped := runSubmitCases(t, "dofile("+absLua(t, jobSubmitLua)+")\n", cases)
	sites := runSubmitCases(t, "dofile("+luaString(site)+")\n", cases)
	// The files as the coordinator writes them, with the nodes' classes:
	// the module counts from those and reads node lines only for an
	// exclusion or an expression naming another llmgw feature.
	classed := runSubmitCases(t, "dofile("+absLua(t, jobSubmitLua)+")\n", classedCases(cases))
	prefers := 0
	for i, c := range cases {
		if shipped[i] != c.want {
			t.Errorf("%s: the shipped job_submit.lua left the job as\n %q, want\n %q", c.name, shipped[i], c.want)
		}
		if classed[i] != c.want {
			t.Errorf("%s: from a file with classes, the job was left as\n %q, want\n %q", c.name, classed[i], c.want)
		}
		if sites[i] != shipped[i] {
			t.Errorf("%s: a site's script calling the module left the job as\n %q, the shipped script as\n %q", c.name, sites[i], shipped[i])
		}
		if !strings.HasPrefix(c.want, "|") {
			prefers++
		}
	}
	if prefers == 0 {
		t.Error("no case got a preference: the cases never reach the composition")
	}
	t.Logf("%d shared cases submitted, %d with a preference", len(cases), prefers)
}

// TestLuaModuleDefinesNoGlobals: a site's script loads the module into the
// Lua state that holds its own functions, so the module may not write a
// single global, loading or working.
func TestLuaModuleDefinesNoGlobals(t *testing.T) {
	features := filepath.Join(t.TempDir(), "features")
	if err := os.WriteFile(features, []byte("# llmgw features (generated by the coordinator; do not edit) synced=1005 interval=30 features=all lines=00000000000000aa\nn1 debug ib-a,llmgw.m1\nn2 debug ib-b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runLua(t, luaPrelude+`
local before = {}
for k in pairs(_G) do before[k] = true end
setmetatable(_G, { __newindex = function(t, k, v)
	io.write("global ", tostring(k), "\n")
	rawset(t, k, v)
end })
local clock = 1000
os.time = function() return clock end
local llmgw = dofile(`+absLua(t, submitModule)+`)
local parts = { debug = setmetatable({name="debug", flag_default=1}, {_part_rec_ptr="debug@1"}) }
llmgw.submit({comment="first"}, parts, 0)
clock = 1010
for _, job in ipairs({
	{comment="llmgw:model=m1"},
	{comment="llmgw:model=m1", features="ib-a|ib-b", min_nodes=2, exc_nodes="n[2-3]"},
	{spank_job_env={[0]="_SLURM_SPANK_OPTION_llmgw_llmgw_model=m1"}},
	{comment="llmgw:model=a/b"},
	{comment="llmgw:model=m1", features={}},
}) do
	llmgw.submit(job, parts, 0)
	io.write("job: ", tostring(job.prefer), " ", tostring(job.admin_comment), "\n")
end
llmgw.modify({}, {}, parts, 0)
for k in pairs(_G) do
	if not before[k] then io.write("global ", tostring(k), "\n") end
end
`, "LLMGW_FEATURE_FILE="+features)
	if strings.Contains(out, "global ") {
		t.Errorf("the module wrote globals:\n%s", out)
	}
	if !strings.Contains(out, "job: llmgw.m1 ") {
		t.Errorf("no job got a preference, so the check saw little of the module:\n%s", out)
	}
}

// moduleState is the start of a Lua driver that runs llmgw's module in one
// Lua state, as slurmctld keeps it: its clock at 1000 (set clock to move
// it), the partition debug with a record pointer, one submission made so
// that the module has seen slurmctld's tables.
func moduleState(t *testing.T) string {
	return luaPrelude + `
local clock = 1000
os.time = function() return clock end
local llmgw = dofile(` + absLua(t, submitModule) + `)
local parts = { debug = setmetatable({name="debug", flag_default=1}, {_part_rec_ptr="debug@1"}) }
llmgw.submit({comment="first"}, parts, 0)
`
}

// TestLuaModuleParsesOnlyChangedFiles runs one Lua state through rewrites of
// the feature file: the parsed nodes are kept while the header's lines=
// digest stays the same (the coordinator rewrites the file every interval
// for its sync time alone), taken again when it changes, and a file without
// the digest (an older coordinator) is read whole every time.
func TestLuaModuleParsesOnlyChangedFiles(t *testing.T) {
	features := filepath.Join(t.TempDir(), "features")
	out := runLua(t, moduleState(t)+`
local function step(at, lines, body)
	clock = at
	local f = assert(io.open(os.getenv("LLMGW_FEATURE_FILE"), "w"))
	f:write("# llmgw features (generated by the coordinator; do not edit) synced=", at - 1, " interval=30 features=all", lines, "\n", body)
	f:close()
	local job = {comment="llmgw:model=m1"}
	llmgw.submit(job, parts, 0)
	io.write(job.prefer or "-", "\n")
end
step(1010, " lines=00000000000000a1", "n1 debug llmgw.m1\n")
-- The same digest over other lines: the nodes as parsed before stand.
step(1020, " lines=00000000000000a1", "n1 debug -\n")
step(1030, " lines=00000000000000a2", "n1 debug -\n")
step(1040, " lines=00000000000000a3", "n1 debug llmgw.m1\n")
-- No digest: every submission reads the lines.
step(1050, "", "n1 debug llmgw.m1\n")
step(1060, "", "n1 debug -\n")
`, "LLMGW_FEATURE_FILE="+features)
	if want := "llmgw.m1\nllmgw.m1\n-\nllmgw.m1\nllmgw.m1\n-\n"; out != want {
		t.Errorf("preferences through the rewrites: %q, want %q", out, want)
	}
}

// TestLuaModuleKeepsOnlyDigestedHeaders: between syncs the module keeps the
// header line it read last and answers from it without parsing again; that
// holds only for a header with a lines= digest. A file without one is read
// whole at every submission even when its header line is the same, and a
// new header line (a later sync) is parsed again, so its synced= decides.
func TestLuaModuleKeepsOnlyDigestedHeaders(t *testing.T) {
	features := filepath.Join(t.TempDir(), "features")
	out := runLua(t, moduleState(t)+`
clock = 1010
local function step(header, body)
	-- A second apart: the module looks at the file once a second.
	clock = clock + 1
	local f = assert(io.open(os.getenv("LLMGW_FEATURE_FILE"), "w"))
	f:write("# llmgw features (generated by the coordinator; do not edit)", header, "\n", body)
	f:close()
	local job = {comment="llmgw:model=m1"}
	llmgw.submit(job, parts, 0)
	io.write(job.prefer or "-", "\n")
end
step(" synced=1009 interval=30 features=all lines=00000000000000b1", "n1 debug llmgw.m1\n")
-- The same line: the nodes as parsed before stand.
step(" synced=1009 interval=30 features=all lines=00000000000000b1", "n1 debug -\n")
-- No digest, then the same line again: read whole both times.
step(" synced=1009 interval=30 features=all", "n1 debug -\n")
step(" synced=1009 interval=30 features=all", "n1 debug llmgw.m1\n")
-- A later sync of the same nodes, read at a time that makes it stale.
step(" synced=1009 interval=30 features=all lines=00000000000000b2", "n1 debug llmgw.m1\n")
clock = 1099
step(" synced=1009 interval=30 features=all lines=00000000000000b2", "n1 debug llmgw.m1\n")
step(" synced=1099 interval=30 features=all lines=00000000000000b2", "n1 debug llmgw.m1\n")
`, "LLMGW_FEATURE_FILE="+features)
	if want := "llmgw.m1\nllmgw.m1\n-\nllmgw.m1\nllmgw.m1\n-\nllmgw.m1\n"; out != want {
		t.Errorf("preferences through the rewrites: %q, want %q", out, want)
	}
}

// TestLuaModuleLooksAtTheFileOncePerSecond: slurmctld runs the module for
// every submission, one at a time under its locks, and one open of the
// feature file costs more than the rest of a job; so the module looks at
// the file at most once per second of its clock (llmgw.features) and keeps
// what it found, a missing file included, and a rewrite is seen in the
// next second. Opens are counted through io.open itself.
func TestLuaModuleLooksAtTheFileOncePerSecond(t *testing.T) {
	features := filepath.Join(t.TempDir(), "features")
	out := runLua(t, luaPrelude+`
local path = os.getenv("LLMGW_FEATURE_FILE")
local opens = 0
local open = io.open
io.open = function(p, mode)
	if p == path then
		opens = opens + 1
	end
	return open(p, mode)
end
local clock = 1000
os.time = function() return clock end
local llmgw = dofile(`+absLua(t, submitModule)+`)
local parts = { debug = setmetatable({name="debug", flag_default=1}, {_part_rec_ptr="debug@1"}) }
llmgw.submit({comment="first"}, parts, 0)
local function write(lines, body)
	local f = assert(open(path, "w"))
	f:write("# llmgw features (generated by the coordinator; do not edit) synced=1005 interval=30 features=all lines=", lines, "\n", body)
	f:close()
end
local function step(what, at, comment)
	clock = at
	local job = {comment=comment or "llmgw:model=m1"}
	llmgw.submit(job, parts, 0)
	io.write(what, ": opens=", opens, " prefer=", job.prefer or "-", "\n")
end
write("00000000000000d1", "n1 debug llmgw.m1\n")
step("first", 1010)
step("same second", 1010)
write("00000000000000d2", "n1 debug -\n")
step("rewritten, same second", 1010)
step("no model, next second", 1011, "hello")
step("a model, next second", 1011)
step("again", 1011)
os.remove(path)
step("removed", 1012)
step("removed, same second", 1012)
write("00000000000000d3", "n1 debug llmgw.m1\n")
step("back, the clock stepped back", 1011)
`, "LLMGW_FEATURE_FILE="+features)
	want := `first: opens=1 prefer=llmgw.m1
same second: opens=1 prefer=llmgw.m1
rewritten, same second: opens=1 prefer=llmgw.m1
no model, next second: opens=1 prefer=-
a model, next second: opens=2 prefer=-
again: opens=2 prefer=-
removed: opens=3 prefer=-
removed, same second: opens=3 prefer=-
back, the clock stepped back: opens=4 prefer=llmgw.m1
`
	if out != want {
		t.Errorf("opens of the feature file, and preferences:\n%s\nwant\n%s", out, want)
	}
}

// TestLuaModuleKeepsPlacementsPerRequest: the module keeps what it placed
// for a request (llmgw_submit.lua, placement) for as long as the file's
// nodes stay the same, and answers the same request from it. Random
// requests on one cluster go through one Lua state, each twice, and every
// answer, first and kept, must be Compose's: a key that missed a part of
// the request would hand one request another's answer.
func TestLuaModuleKeepsPlacementsPerRequest(t *testing.T) {
	cluster := []FeatureNode{
		{Name: "n1", Partitions: []string{"debug"}, Features: []string{"ib-a", "llmgw.m1"}},
		{Name: "n2", Partitions: []string{"debug", "p2"}, Features: []string{"gpu", "ib-a", "llmgw.m1", "llmgw.m2"}},
		{Name: "n3", Partitions: []string{"debug"}, Features: []string{"ib-b", "llmgw.m3"}},
		{Name: "n4", Partitions: []string{"p2"}, Features: []string{"gpu", "ib-b", "llmgw.m2", "llmgw.m3"}},
		{Name: "n5", Partitions: []string{"debug", "p2"}, Features: []string{"ib-b"}},
		{Name: "n6", Partitions: []string{"debug"}, Features: []string{"gpu", "ib-a", "llmgw.m1"}},
	}
	var cases []submitCase
	prefers := 0
	for i, in := range randomInputs(rand.New(rand.NewPCG(17, 2026)), 600, cluster) {
		// What job_submit sees: no room list, no llmgw sbatch mark, and one
		// version of the file (features=all), so that nothing but the
		// request changes between submissions.
		in.NoRoom, in.Composed, in.Complete = nil, false, true
		want := Compose(in)
		sc, ok := submitCaseOf(fmt.Sprintf("request %d %+v", i, in), in, want, 1)
		if !ok {
			continue
		}
		if want.Prefer != "" {
			prefers++
		}
		cases = append(cases, sc, sc)
	}
	if prefers < len(cases)/20 {
		t.Fatalf("only %d of %d requests get a preference; the generator misses the main path", prefers, len(cases)/2)
	}
	got := runSubmitCases(t, "dofile("+absLua(t, jobSubmitLua)+")\n", cases)
	classed := runSubmitCases(t, "dofile("+absLua(t, jobSubmitLua)+")\n", classedCases(cases))
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("%s, submission %d: left as\n %q, want\n %q", c.name, i%2+1, got[i], c.want)
		}
		if classed[i] != c.want {
			t.Errorf("%s, submission %d, from a file with classes: left as\n %q, want\n %q", c.name, i%2+1, classed[i], c.want)
		}
	}
	t.Logf("%d requests, each submitted twice, %d with a preference", len(cases)/2, prefers)
}

// TestLuaJobSubmitFindsTheModule: the shipped script finds the module
// beside itself (a site that copies both into its slurm.conf directory),
// and with no module to load it logs why and lets every job pass untouched:
// a missing file must neither stop slurmctld nor reject a job.
func TestLuaJobSubmitFindsTheModule(t *testing.T) {
	lua := lua51(t)
	dir := t.TempDir()
	for _, f := range append([]string{jobSubmitLua, submitModule}, submitParts...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	features := filepath.Join(dir, "features")
	if err := os.WriteFile(features, []byte("# llmgw features (generated by the coordinator; do not edit) synced=1005 interval=30 features=all lines=00000000000000c1\nn1 debug llmgw.m1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	driver := filepath.Join(dir, "driver.lua")
	if err := os.WriteFile(driver, []byte(luaPrelude+`
local clock = 1000
os.time = function() return clock end
dofile(arg[1])
local parts = { debug = setmetatable({name="debug", flag_default=1}, {_part_rec_ptr="debug@1"}) }
slurm_job_submit({comment="first"}, parts, 0)
clock = 1010
local job = {comment="llmgw:model=m1"}
local rc = slurm_job_submit(job, parts, 0)
io.write(rc, "|", job.prefer or "", "|", job.admin_comment or "")
`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(env ...string) (string, string) {
		cmd := exec.Command(lua, driver, filepath.Join(dir, "job_submit.lua"))
		cmd.Env = append(os.Environ(), append([]string{"LLMGW_FEATURE_FILE=" + features}, env...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("lua5.1: %v\n%s", err, stderr.String())
		}
		return string(out), stderr.String()
	}
	// Beside the script, with no LLMGW_SUBMIT_MODULE.
	if out, _ := run("LLMGW_SUBMIT_MODULE="); !strings.HasPrefix(out, "0|llmgw.m1|") {
		t.Errorf("module beside the script: %q; want a preference", out)
	}
	// No module anywhere it looks.
	missing := filepath.Join(dir, "nope.lua")
	out, stderr := run("LLMGW_SUBMIT_MODULE=" + missing)
	if out != "0||" {
		t.Errorf("module missing: the job left as %q; want slurm.SUCCESS and the job untouched", out)
	}
	if !strings.Contains(stderr, "cannot load the job_submit module "+missing) {
		t.Errorf("module missing: the log says %q; want why", stderr)
	}
}
