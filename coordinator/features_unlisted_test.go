package coordinator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/api"
)

// TestFeaturesCoverUnlistedNodes: a record write covers the nodes of the
// record that sinfo does not list (FUTURE ones, one in no partition), read
// with scontrol -a -F before the write, so that the record is not split;
// and when they cannot be read, no record is written at all. The listings
// are 22.05's captures of a partly FUTURE NodeName line (f[1-3], f1
// brought up) and a node in no partition (f4), with f1's llmgw features
// taken off so that it shares its set with f[2-4] again.
func TestFeaturesCoverUnlistedNodes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fixture := func(name string) string {
		data, err := os.ReadFile(filepath.Join("..", "slurm", "testdata", "22.05", "future", name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(data), "f1|llmgw.m1,llmgw.qwen-2.5", "f1|(null)")
		s = strings.ReplaceAll(s, "f1|llmgw.m1|", "f1|(null)|")
		s = strings.ReplaceAll(s, "AvailableFeatures=llmgw.m1,llmgw.qwen-2.5 ActiveFeatures=llmgw.m1", "AvailableFeatures=(null) ActiveFeatures=(null)")
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	list, sets, all := fixture("sinfo-nodes-list.txt"), fixture("sinfo-available-sets.txt"), fixture("scontrol-show-nodes-oneline.txt")
	conf, _ := filepath.Abs(filepath.Join("..", "slurm", "testdata", "22.05", "scontrol-show-config.txt"))
	calls := filepath.Join(dir, "scontrol-calls")
	broken := filepath.Join(dir, "broken")
	for name, body := range map[string]string{
		"sinfo": `case "$*" in *"-N -h -o"*) exec cat '` + list + `';; *%f*) exec cat '` + sets + `';; *%P*) echo 'debug*';; esac`,
		"scontrol": `echo "$*" >>'` + calls + `'
case "$*" in "show config") exec cat '` + conf + `';;
"-a -F -o show node") [ -e '` + broken + `' ] && { echo "slurm_load_node error" >&2; exit 1; }; exec cat '` + all + `';; esac`,
		"squeue": `exit 0`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnv(t, Config{Features: true, Sinfo: filepath.Join(dir, "sinfo"), Scontrol: filepath.Join(dir, "scontrol"),
		FeatureFile: filepath.Join(dir, "features"), FeatureInterval: time.Minute}, testTokens)
	if _, err := e.admin.PutModel(ctx, api.Model{Name: "llama", Source: "/models/llama"}); err != nil {
		t.Fatal(err)
	}
	e.clock.set(t0)
	if _, err := e.agent.PostReport(ctx, report("f1", "", 1, api.Weight{Path: "/models/llama", Complete: true, Size: 1})); err != nil {
		t.Fatal(err)
	}

	// Unreadable: no record write, and the sync says why.
	os.WriteFile(broken, nil, 0o644)
	res, err := e.admin.SyncFeatures(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Error, "sinfo does not list") || len(res.Commands) != 0 {
		t.Errorf("the unlisted nodes unreadable: %+v; want an error and no command", res)
	}

	os.Remove(broken)
	res, err = e.admin.SyncFeatures(ctx, true)
	if err != nil || res.Error != "" {
		t.Fatalf("sync: %+v, %v", res, err)
	}
	if len(res.Commands) == 0 || !strings.Contains(res.Commands[0], "NodeName='f[1-4]' AvailableFeatures=llmgw.llama") {
		t.Errorf("commands %q; want the record write to cover f1 and the unlisted f[2-4] alike", res.Commands)
	}
	if res.Nodes != 5 {
		t.Errorf("%d nodes; want the 5 sinfo lists (the unlisted ones are no node a job runs on)", res.Nodes)
	}
}
