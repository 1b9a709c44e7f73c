package main

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/llmgw/llmgw"

// importRules says, for each llmgw package, which other llmgw packages it may
// import, and why the line is drawn there. A package missing from the table
// fails the test: a new package decides its place on purpose.
var importRules = map[string]struct {
	may []string
	why string
}{
	"internal/fusetest":    {nil, "a test helper (bindfs mounts that stop answering) on the standard library alone, for any package's integration tests"},
	"internal/slurmtest":   {nil, "a test helper (slurmctld's node config records, counted from its log) on the standard library alone, for any package's integration tests, package slurm's among them"},
	"internal/jsonlite":    {nil, "the hook's reflection-free JSON reader is a standard-library leaf: catalog and nodeconf decode with it"},
	"weights/catalog":      {[]string{"internal/jsonlite"}, "the name rules are a standard-library leaf (jsonlite is one too), so every part, the hook binary included, applies the same ones"},
	"api":                  {[]string{"weights/catalog", "slurm"}, "the protocol is a leaf, so hooks and agents link no server code (slurm: the node-name rule)"},
	"agent/nodeconf":       {[]string{"weights/catalog", "internal/jsonlite"}, "the node's configuration is linked by the hook binary, so it stays light: the standard library and the catalog leaf"},
	"agent/config":         {[]string{"agent/nodeconf", "weights/catalog", "slurm"}, "the loader (toml, pflag) and the checks the agent and llmgw's hooks share, so a setting means the same to both (slurm: the node and fabric name rules)"},
	"weights/scan":         {[]string{"weights/catalog"}, "the scanner only observes files; it shares the name rules and nothing else, so the agent and the CLI build on it alone"},
	"weights/fetch":        {[]string{"weights/catalog"}, "the fetcher stands alone beside the scanner: it shares the cache and .part names through catalog, not through the scanner"},
	"weights/gc":           {[]string{"weights/catalog"}, "the node-side gc is linked by the Epilog: standard library and the name rules only"},
	"weights/evict":        {[]string{"weights/catalog"}, "eviction decides from what the agent gathers and the coordinator answers; it does no I/O and shares the name rules only"},
	"weights/hub":          {[]string{"weights/catalog", "weights/fetch"}, "the Hub's API (a revision's commit, its files, the selection) is a client of its own: the command line resolves a model with it, and nothing on a node asks the Hub what a branch means (fetch: the redirect and Retry-After rules the node's fetch applies)"},
	"weights/hub/hubtest":  {nil, "the Hub stand-in for tests stands alone, so huggingface_hub and llmgw are tested against the same server"},
	"placement":            {[]string{"weights/catalog"}, "placement is the pure presence model and ranking, tested with tables: it reads the catalog's name rules and nothing that does I/O"},
	"slurm":                {nil, "everything that speaks Slurm is one leaf, tested against real Slurm"},
	"agent":                {[]string{"agent/config", "agent/nodeconf", "api", "api/munge", "weights/catalog", "weights/scan", "weights/fetch", "weights/gc", "weights/evict", "slurm"}, "an agent scans, fetches and reports: it must not depend on server code or the database"},
	"prolog":               {[]string{"agent/nodeconf", "weights/catalog"}, "the hooks' fast path runs in every job start from the small llmgw-hook binary: no clients, no fetcher"},
	"prolog/full":          {[]string{"prolog", "agent/nodeconf", "api", "weights/catalog", "weights/fetch", "weights/gc", "slurm"}, "the hooks' slow path runs in the full binary: it talks to the coordinator and the agent, fetches as a fallback, runs node gc, and calls scontrol"},
	"coordinator":          {[]string{"api", "coordinator/prefetch", "coordinator/store", "api/munge", "placement", "slurm", "weights/catalog", "internal/jsonlite"}, "the service wires store, placement, prefetch and slurm (and munge, which says who speaks); it reads reports' weights with jsonlite"},
	"coordinator/prefetch": {[]string{"api", "slurm"}, "the prefetcher turns Slurm's plans into asks; it reads the coordinator's presence through an interface the coordinator implements, so it never reaches into the server or the database"},
	"api/munge":            {[]string{"api"}, "MUNGE credentials sit under the protocol they sign: the coordinator decodes them, agents and the CLI make them, the hook never links them"},
	"api/munge/mungetest":  {[]string{"api/munge"}, "tests start real munged daemons through it"},
	"api/swarmtest":        {[]string{"api", "api/munge"}, "hostile swarm members for tests and the liars benchmark speak the protocol and MUNGE alone, so what they do is what any program on a node could"},
	"coordinator/store":    {[]string{"api", "weights/catalog", "placement"}, "the store persists api types and the presence model's holdings; it decides nothing"},
	"api/table":            {[]string{"api", "weights/catalog"}, "the command line's tables render API answers; linking no server code keeps the client free of the coordinator and sqlite"},
	"cmd/llmgw/demo":       {[]string{"agent/nodeconf", "api", "placement", "slurm", "weights/catalog"}, "the demo runs llmgw's own binary as coordinator and agents and shows the commands a user would type; it reads api types and the node configuration, and speaks to the dev cluster through slurm"},
	"cmd/llmgw/doctor":     {[]string{"api", "slurm", "weights/catalog", "weights/scan"}, "the doctor reads every side (Slurm, agent socket, coordinator, cache) through their clients and links no server code"},
	"cmd/llmgw":            {[]string{"*"}, "the binary wires everything"},
	"cmd/llmgw-hook":       {[]string{"prolog", "agent/nodeconf", "weights/catalog"}, "the hook binary starts on every job: only the fast path (cmd/llmgw-hook/deps_test.go)"},

	// packaging/ holds only the package's integration test (dpkg-deb).
	"packaging": {nil, "the package description's test imports no llmgw code"},

	// Tools under scripts/ are programs of their own, not part of llmgw.
	"scripts/bench/origin": {nil, "the benchmark's origin server stands alone, so it measures only HTTP"},
	"internal/loopfs":      {nil, "tests' ext4 loop filesystem stands alone, like fusetest"},
	"scripts/bench/evict":  {[]string{"weights/evict"}, "the eviction replay runs the agent's own policy and nothing else"},
	"scripts/bench/hub":    {[]string{"weights/hub/hubtest"}, "the Hub benchmark serves the tests' Hub stand-in, so it measures what the tests check"},
	"scripts/bench/liar":   {[]string{"api", "api/munge", "api/swarmtest"}, "the liars benchmark's hostile node is the tests' hostile member: the protocol and its node's MUNGE alone, what root on that node can do"},
}

// onlyIn confines an import to the packages that own what it does.
var onlyIn = map[string]struct {
	pkgs []string
	why  string
}{
	"github.com/mattn/go-sqlite3": {[]string{"coordinator/store"}, "one package owns the database file"},
	"os/exec":                     {[]string{"slurm", "cmd/llmgw", "cmd/llmgw/demo", "api/munge", "api/munge/mungetest", "internal/fusetest", "internal/loopfs"}, "subprocesses go through slurm's runner, with timeouts and argument vectors, never a shell (the demo starts llmgw's own binary and bindfs, under its temporary directory; munge: the munge/unmunge programs when built without cgo, and the tests' munged; fusetest: tests' bindfs, linked by no binary)"},
}

type listedPackage struct {
	ImportPath string
	Imports    []string
}

func TestImportDirections(t *testing.T) {
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if strings.HasPrefix(rel, "internal/") && len(importRules[rel].may) > 0 {
			// internal/ holds leaves only (test helpers, the hook's JSON
			// reader): a package that needs llmgw's own lives beside them.
			t.Errorf("%s may import %v: a package under internal/ is a leaf; move it beside what it needs (as api/munge)", rel, importRules[rel].may)
		}
		rule, ok := importRules[rel]
		if !ok {
			t.Errorf("package %s has no import rule; add it to importRules with the reason for its place", rel)
			continue
		}
		for _, imp := range p.Imports {
			if dep, ok := strings.CutPrefix(imp, module+"/"); ok {
				if !slices.Contains(rule.may, "*") && !slices.Contains(rule.may, dep) {
					t.Errorf("%s imports %s: %s", rel, dep, rule.why)
				}
			}
			if only, ok := onlyIn[imp]; ok && !slices.Contains(only.pkgs, rel) {
				t.Errorf("%s imports %s: %s", rel, imp, only.why)
			}
		}
	}
}
