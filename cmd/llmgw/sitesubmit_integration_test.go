//go:build integration

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/coordinator"
	"github.com/llmgw/llmgw/internal/slurmtest"
	"github.com/llmgw/llmgw/placement"
	"github.com/llmgw/llmgw/slurm"
	"github.com/llmgw/llmgw/weights/catalog"
)

// siteJobSubmit is a site's own job_submit.lua, as slurm/lua/llmgw_submit.lua
// tells a site to write one: rules of its own (a job name it refuses, a note
// of its own in AdminComment) and llmgw's module called from its own
// functions. %s is the module's path.
const siteJobSubmit = `-- A site's job_submit.lua: its own rules, then llmgw's module.
local llmgw = dofile(%q)

function slurm_job_submit(job_desc, part_list, submit_uid)
	if job_desc.name == "site-reject" then
		slurm.log_user("site: jobs named site-reject are refused here")
		return slurm.ERROR
	end
	job_desc.admin_comment = "site: checked"
	return llmgw.submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	if job_desc.name == "site-reject" then
		slurm.log_user("site: no job may be renamed site-reject")
		return slurm.ERROR
	end
	return llmgw.modify(job_desc, job_rec, part_list, modify_uid)
end

return slurm.SUCCESS
`

// siteNote is what siteJobSubmit puts in AdminComment before llmgw's note.
const siteNote = "site: checked"

// sharedCases is slurm/testdata/compose/cases.json, the cases Go's Compose
// and the Lua module share.
type sharedCases struct {
	Clusters map[string][]slurm.FeatureNode `json:"clusters"`
	Cases    []struct {
		Name string `json:"name"`
		In   struct {
			slurm.ComposeInput
			Cluster string `json:"cluster"`
		} `json:"in"`
	} `json:"cases"`
}

// siteCase is one shared case as a real submission.
type siteCase struct {
	name string
	in   slurm.ComposeInput
	args []string // sbatch's options for it
}

// siteCases turns the shared cases of the "dev" cluster into sbatch
// options. Left out, each for a reason the dev cluster or job_submit
// imposes: cases of another cluster (six nodes, or a feature file without
// the fabrics) or of partition p12 (the dev cluster has debug only); what
// only llmgw sbatch produces (no room on a node, a composed job); and what
// job_submit never composes (an invalid model name, a comment the tag would
// push over Slurm's limit, a comment naming another model). Cases of the
// SPANK option need the plugin loaded.
func siteCases(t *testing.T, spank bool) (cases []siteCase, devCluster []slurm.FeatureNode, skipped []string) {
	t.Helper()
	b, err := os.ReadFile("../../slurm/testdata/compose/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cs sharedCases
	if err := json.Unmarshal(b, &cs); err != nil {
		t.Fatalf("slurm/testdata/compose/cases.json: %v", err)
	}
	const tag = "llmgw:model="
	for _, c := range cs.Cases {
		in := c.In.ComposeInput
		why := ""
		comment := in.Comment
		if !in.Spank && !strings.Contains(" "+comment+" ", " "+tag+in.Model+" ") {
			comment = strings.TrimSpace(comment + " " + tag + in.Model)
		}
		otherModel := false
		for _, f := range strings.Fields(in.Comment) {
			if m, ok := strings.CutPrefix(f, tag); ok && m != "" {
				otherModel = !in.Spank && m != in.Model
				break
			}
		}
		switch {
		case c.In.Cluster != "dev":
			why = "cluster " + c.In.Cluster
		case slices.ContainsFunc(in.Partitions, func(p string) bool { return p != "debug" }):
			why = "partition " + strings.Join(in.Partitions, ",")
		case len(in.NoRoom) > 0 || in.Composed || strings.Contains(in.Comment, "llmgw:composed"):
			why = "llmgw sbatch's"
		case catalog.ValidModelName(in.Model) != nil || len(comment) > slurm.MaxExpression || otherModel:
			why = "job_submit never composes it"
		case in.Spank && !spank:
			why = "the SPANK plugin is not loaded"
		}
		if why != "" {
			skipped = append(skipped, c.Name+" ("+why+")")
			continue
		}
		args := []string{"-J", "llmgw-sitefit"}
		if in.Spank {
			args = append(args, "--llmgw-model="+in.Model)
		}
		if comment != "" {
			args = append(args, "--comment="+comment)
		}
		if in.Constraint != "" {
			args = append(args, "--constraint="+in.Constraint)
		}
		if in.Prefer != "" {
			args = append(args, "--prefer="+in.Prefer)
		}
		if in.Nodes > 0 {
			args = append(args, fmt.Sprintf("-N%d", in.Nodes))
		}
		if len(in.Exclude) > 0 {
			args = append(args, "--exclude="+strings.Join(in.Exclude, ","))
		}
		if in.NodeList {
			args = append(args, "--nodelist=n1")
		}
		if len(in.Partitions) > 0 {
			args = append(args, "--partition="+strings.Join(in.Partitions, ","))
		}
		in.Comment = comment
		cases = append(cases, siteCase{c.Name, in, args})
	}
	return cases, cs.Clusters["dev"], skipped
}

// withoutModel is args with the model taken out: no --llmgw-model, and no
// llmgw:model= word in the comment.
func withoutModel(args []string) []string {
	var out []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--llmgw-model="):
			continue
		case strings.HasPrefix(a, "--comment="):
			var words []string
			for _, w := range strings.Fields(strings.TrimPrefix(a, "--comment=")) {
				if !strings.HasPrefix(w, "llmgw:model=") {
					words = append(words, w)
				}
			}
			if len(words) == 0 {
				continue
			}
			a = "--comment=" + strings.Join(words, " ")
		}
		out = append(out, a)
	}
	return out
}

// submitted is a held job as slurmctld recorded it, or the refusal.
type submitted struct {
	Refused                                              string
	Features, Prefer, ExcNodeList, Comment, AdminComment string
}

var (
	reJobFeatures = regexp.MustCompile(`(?m)(?:^|\s)Features=(\S*)`)
	reJobPrefer   = regexp.MustCompile(`(?m)(?:^|\s)Prefer=(\S*)`)
	reJobExc      = regexp.MustCompile(`(?m)(?:^|\s)ExcNodeList=(\S*)`)
)

// submitAs submits args held, reads the job back and cancels it.
func submitAs(t *testing.T, sl *slurm.Runner, args ...string) submitted {
	t.Helper()
	ctx := context.Background()
	out, err := sl.Run(ctx, "sbatch", append([]string{"--parsable", "-H", "-o", "/dev/null"}, append(args, "--wrap", "true")...)...)
	if err != nil {
		var ce *slurm.CommandError
		if errors.As(err, &ce) {
			return submitted{Refused: strings.TrimSpace(ce.Stderr)}
		}
		t.Fatalf("sbatch %q: %v", args, err)
	}
	id := strings.TrimSpace(strings.Split(string(out), ";")[0])
	defer sl.Run(ctx, "scancel", id)
	show, err := sl.Run(ctx, "scontrol", "show", "job", id)
	if err != nil {
		t.Fatal(err)
	}
	s := string(show)
	var j submitted
	for _, f := range []struct {
		re  *regexp.Regexp
		dst *string
	}{{reJobFeatures, &j.Features}, {reJobPrefer, &j.Prefer}, {reJobExc, &j.ExcNodeList}, {reComment, &j.Comment}, {reAdmin, &j.AdminComment}} {
		if m := f.re.FindStringSubmatch(s); m != nil {
			*f.dst = strings.TrimSpace(m[1])
		}
	}
	// scontrol says (null) for an empty field.
	for _, p := range []*string{&j.Features, &j.Prefer, &j.ExcNodeList, &j.Comment, &j.AdminComment} {
		if *p == "(null)" {
			*p = ""
		}
	}
	return j
}

// TestSiteJobSubmitMatchesShipped is issue 17's "Done when" for the
// job_submit module, in the dev cluster's real slurmctld: a site's own
// job_submit.lua that calls llmgw_submit.lua from its own slurm_job_submit
// gives every shared case of slurm/testdata/compose/ that the dev cluster
// can express the same job as the shipped job_submit.lua does (Features,
// Prefer, ExcNodeList, Comment; AdminComment with the site's note before
// llmgw's), and the shipped script gives what Go's Compose gives for the
// same nodes. The site's own rules work beside it: a job name it refuses is
// refused, on submit and on modify. A case Slurm refuses must be refused
// without a model as well: llmgw's composition never gets a job rejected
// (it did, on 22.05, 24.11 and 26.05, while Compose nested parentheses).
//
// The nodes get the llmgw features of cases.json's "dev" cluster (its
// fabrics are the dev cluster's) through Runner.ApplyFeatures, and the
// feature file is the coordinator's own FeatureFile of Slurm's nodes read
// back, so the file and Slurm agree as after a sync.
//
// slurmctld reloads job_submit.lua only when the file's mtime is newer than
// at its last load (docs/slurm/behaviour.md §6): the test links its site
// script in place of the state dir's job_submit.lua, and when done links
// the shipped one back and touches it, so that the next submission loads it
// again; then it checks that the shipped script answers.
func TestSiteJobSubmitMatchesShipped(t *testing.T) {
	_, sl := clusterBin(t)
	ctx := context.Background()
	conf := os.Getenv("SLURM_CONF")
	dir := filepath.Dir(conf)
	link := filepath.Join(dir, "job_submit.lua")
	shippedTarget, err := os.Readlink(link)
	if err != nil {
		t.Fatalf("%s is not the link scripts/dev-cluster makes: %v", link, err)
	}
	if !filepath.IsAbs(shippedTarget) {
		shippedTarget = filepath.Join(dir, shippedTarget)
	}
	module := filepath.Join(dir, "llmgw_submit.lua")
	if _, err := os.Stat(module); err != nil {
		t.Fatalf("the module beside job_submit.lua: %v", err)
	}

	cases, devCluster, skipped := siteCases(t, sl.SpankOption(ctx))
	t.Logf("%d shared cases submitted; left out: %s", len(cases), strings.Join(skipped, "; "))
	if len(cases) < 20 {
		t.Fatalf("only %d shared cases apply to the dev cluster; the conversion lost its way", len(cases))
	}

	// The dev cluster with cases.json's "dev" features: its fabrics must be
	// the dev cluster's, and its llmgw features go on the nodes.
	nodes, err := sl.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	desired := map[string][]string{}
	for _, fn := range devCluster {
		i := slices.IndexFunc(nodes, func(n slurm.Node) bool { return n.Name == fn.Name })
		if i < 0 {
			t.Fatalf("cases.json's dev cluster has %s; the dev cluster does not", fn.Name)
		}
		var fabric []string
		for _, f := range fn.Features {
			if strings.HasPrefix(f, placement.FeaturePrefix) {
				desired[fn.Name] = append(desired[fn.Name], f)
			} else {
				fabric = append(fabric, f)
			}
		}
		if have := slices.Sorted(slices.Values(nodes[i].Active)); !slices.Equal(have, slices.Sorted(slices.Values(fabric))) {
			t.Fatalf("%s has %q; cases.json's dev cluster gives it %q besides llmgw's (is a coordinator running?)", fn.Name, have, fabric)
		}
	}
	featureFile := filepath.Join(dir, "llmgw-features")
	oldFile, oldErr := os.ReadFile(featureFile)
	t.Cleanup(func() {
		ctx := context.Background()
		sl.Run(ctx, "scancel", "-n", "llmgw-sitefit")
		if oldErr == nil {
			os.WriteFile(featureFile, oldFile, 0o644)
		} else {
			os.Remove(featureFile)
		}
		if nodes, err := sl.Nodes(ctx); err != nil {
			t.Errorf("sinfo: %v", err)
		} else if err := sl.ApplyFeatures(ctx, slurm.PlanFeatures(nodes, placement.FeaturePrefix, nil, nil), nil).Err(); err != nil {
			t.Errorf("taking the llmgw features off again: %v", err)
		}
		noneDrained(t, sl)
	})
	// As the coordinator writes them: every model any case names offered
	// (AvailableFeatures) on every node, whole config records at a time,
	// and active only where cases.json's dev cluster holds it, so that a
	// case for a model no node holds asks Slurm about a feature every node
	// offers and none has active. The records must stay as they were.
	var offered []string
	for _, c := range cases {
		offered = append(offered, placement.FeaturePrefix+c.in.Model)
	}
	for _, fs := range desired {
		offered = append(offered, fs...)
	}
	// (The coordinator offers a record only what its nodes hold or held
	// within the hour; offering more is what a site's long-held models
	// look like, and the case that must still hold.)
	keep := map[string][]string{}
	for _, n := range nodes {
		keep[n.Name] = offered
	}
	records := slurmtest.ConfigRecords(t, sl, "debug")
	if err := sl.ApplyFeatures(ctx, slurm.PlanFeatures(nodes, placement.FeaturePrefix, desired, keep), nil).Err(); err != nil {
		t.Fatal(err)
	}
	if after := slurmtest.ConfigRecords(t, sl, "debug"); after != records {
		t.Fatalf("slurmctld has %d node config records after llmgw wrote its features, %d before", after, records)
	}
	if nodes, err = sl.Nodes(ctx); err != nil {
		t.Fatal(err)
	}
	var cluster []slurm.FeatureNode
	for _, n := range nodes {
		cluster = append(cluster, slurm.FeatureNode{Name: n.Name, Partitions: n.Partitions, Features: n.Active})
	}

	// fresh makes the loaded script trust the feature file: a job without
	// a model lets it see slurmctld's tables (a new load counts as a
	// rebuild), and a file synced in a later second follows; the module
	// looks at the file once a second, so the cases wait for the next.
	fresh := func() {
		t.Helper()
		if j := submitAs(t, sl, "-J", "llmgw-sitefit"); j.Refused != "" {
			t.Fatalf("a job without a model was refused: %s", j.Refused)
		}
		seen := time.Now().Unix()
		for time.Now().Unix() <= seen {
			time.Sleep(50 * time.Millisecond)
		}
		data := coordinator.FeatureFile(nodes, time.Now(), time.Hour, false)
		if err := os.WriteFile(featureFile, data, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond)
	}
	// runAll submits every case through the script loaded now.
	runAll := func() []submitted {
		t.Helper()
		fresh()
		out := make([]submitted, len(cases))
		for i, c := range cases {
			out[i] = submitAs(t, sl, c.args...)
		}
		return out
	}

	// The shipped script, as the cluster started with it. A job named
	// site-reject passes it: the site's rule is not there.
	if j := submitAs(t, sl, "-J", "site-reject"); j.Refused != "" {
		t.Fatalf("the shipped job_submit.lua refused a job named site-reject (%s): is a site's script still linked from an earlier run?", j.Refused)
	}
	shipped := runAll()

	// The site's script, in its place. Written a second after the shipped
	// script's last use, so that its mtime is newer than that load.
	site := filepath.Join(dir, "llmgw-sitefit-job_submit.lua")
	time.Sleep(1100 * time.Millisecond)
	if err := os.WriteFile(site, []byte(fmt.Sprintf(siteJobSubmit, module)), 0o644); err != nil {
		t.Fatal(err)
	}
	relink := func(target string) error {
		tmp := link + ".llmgw-sitefit"
		os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return err
		}
		return os.Rename(tmp, link)
	}
	t.Cleanup(func() {
		// Back to the shipped script, newer than the site's load.
		time.Sleep(1100 * time.Millisecond)
		if err := relink(shippedTarget); err != nil {
			t.Errorf("PUT BACK BY HAND: ln -sfn %s %s: %v", shippedTarget, link, err)
			return
		}
		now := time.Now()
		if err := os.Chtimes(shippedTarget, now, now); err != nil {
			t.Errorf("touch %s (slurmctld reloads it only when newer; touch it by hand): %v", shippedTarget, err)
		}
		os.Remove(site)
		if j := submitAs(t, sl, "-J", "site-reject"); j.Refused != "" {
			t.Errorf("after putting the shipped job_submit.lua back, a job named site-reject is refused (%s): slurmctld did not reload it", j.Refused)
		}
	})
	if err := relink(site); err != nil {
		t.Fatal(err)
	}
	if j := submitAs(t, sl, "-J", "site-reject"); !strings.Contains(j.Refused, "site-reject are refused") {
		t.Fatalf("with the site's job_submit.lua linked, a job named site-reject was not refused by it (%+v): slurmctld did not load it", j)
	}
	sites := runAll()

	prefers := 0
	for i, c := range cases {
		sh, st := shipped[i], sites[i]
		want := st
		if want.Refused == "" {
			if a, ok := strings.CutPrefix(st.AdminComment, siteNote+"; "); ok {
				want.AdminComment = a
			} else {
				t.Errorf("%s: AdminComment %q lacks the site's note before llmgw's", c.name, st.AdminComment)
			}
		}
		if want != sh {
			t.Errorf("%s (sbatch %s):\n site script: %+v\n shipped:     %+v", c.name, strings.Join(c.args, " "), st, sh)
		}
		if sh.Refused != "" {
			// llmgw never gets a job refused: the same job without a model,
			// which the module leaves alone, must be refused too.
			plain := withoutModel(c.args)
			if j := submitAs(t, sl, plain...); j.Refused == "" {
				t.Errorf("%s: refused with llmgw's composition (%s), yet Slurm takes the same job without a model (sbatch %s): llmgw made Slurm reject it",
					c.name, sh.Refused, strings.Join(plain, " "))
			} else {
				t.Logf("%s: refused by Slurm under both scripts, and without a model too: %s", c.name, sh.Refused)
			}
			continue
		}
		if !strings.Contains(sh.AdminComment, "llmgw: model "+c.in.Model) {
			t.Errorf("%s: AdminComment %q; want the module's note", c.name, sh.AdminComment)
		}
		in := c.in
		in.Cluster, in.Prefix, in.Complete = cluster, placement.FeaturePrefix, true
		g := slurm.Compose(in)
		wantPrefer, wantComment := g.Prefer, g.Comment
		if wantPrefer == "" {
			wantPrefer = in.Prefer
		}
		if wantComment == "" || in.Spank {
			wantComment = in.Comment
		}
		if sh.Prefer != wantPrefer || sh.Comment != wantComment {
			t.Errorf("%s: the shipped script gave Prefer=%q Comment=%q; Go's Compose gives %q, %q (%s)",
				c.name, sh.Prefer, sh.Comment, wantPrefer, wantComment, strings.Join(g.Notes, "; "))
		}
		if g.Prefer != "" {
			prefers++
		}
	}
	if prefers == 0 {
		t.Error("no case got a preference: the cases never reached the composition")
	}
	t.Logf("%d cases the same under both scripts, %d with a preference", len(cases), prefers)

	// The site's modify rule beside llmgw.modify, on a job with a preference.
	j := submitHeld(t, sl, "-J", "llmgw-sitefit", "--comment=llmgw:model=m1", "--wrap", "true")
	if _, err := sl.Run(ctx, "scontrol", "update", "JobId="+j, "Name=site-reject"); err == nil {
		t.Errorf("the site's slurm_job_modify let job %s be renamed site-reject", j)
	}
	if _, err := sl.Run(ctx, "scontrol", "update", "JobId="+j, "Name=llmgw-sitefit-renamed"); err != nil {
		t.Errorf("renaming job %s through the site's slurm_job_modify and llmgw.modify: %v", j, err)
	}
	if p := jobField(sl, j, "Prefer"); p != "llmgw.m1" {
		t.Errorf("job %s's Prefer after the modify is %q, want llmgw.m1 kept", j, p)
	}
}
