package coordinator

import (
	"context"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// revReport is node's report on the revision files (source src), nothing
// held.
func revReport(node, src string, files []catalog.RevisionFile) api.SwarmReport {
	return api.SwarmReport{Node: node, Source: src, SHA256: catalog.RevisionDigest(files), Size: catalog.RevisionSize(files), ChunkSize: DefaultSwarmMinChunk}
}

// TestSwarmRevisionKeys (issue 25): a Hub model and a set of pinned files
// are each one swarm per fabric, keyed on the catalog's revision (its
// source, the digest of its ordered file list, the sum of its sizes), which
// the coordinator computes from the entry; a member that names another
// digest or size is refused in words. A set's first file is still a swarm
// of its own, told apart by its sha256.
func TestSwarmRevisionKeys(t *testing.T) {
	e := swarmEnv(t)
	ctx := context.Background()
	hub := catalog.Hub{Repo: "org/tiny", Revision: "main", Commit: strings.Repeat("c", 40), Files: []catalog.HubFile{
		{Path: "config.json", Size: 1234, Blob: strings.Repeat("b", 40)},
		{Path: "model.safetensors", Size: 2*DefaultSwarmMinChunk + 5, SHA256: strings.Repeat("d", 64)},
	}}
	hubSrc := catalog.HubSource(hub.Repo, hub.Commit)
	addModel(t, e, api.Model{Name: "tiny", Source: hubSrc, Hub: &hub})
	rev := catalog.HubRevision(hub)
	p := ask(t, e, revReport("n1", hubSrc, rev))
	if !p.Lease || p.ChunkSize != DefaultSwarmMinChunk {
		t.Fatalf("the Hub model's revision: lease %v, chunk %d; want the lease, the coordinator's chunk", p.Lease, p.ChunkSize)
	}
	if p = ask(t, e, revReport("n2", hubSrc, rev)); p.Lease || p.Holder != "n1" {
		t.Errorf("a second member: lease %v, holder %q; one lease per fabric and revision", p.Lease, p.Holder)
	}
	other := append([]catalog.RevisionFile(nil), rev...)
	other[1].Name = "model-00001-of-00001.safetensors"
	r := revReport("n3", hubSrc, other)
	r.Size = catalog.RevisionSize(rev)
	if _, err := e.agent.Swarm(ctx, r); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("another file list under the model's source: %v; want refused, naming the model", err)
	}
	r = revReport("n3", hubSrc, rev)
	r.Size++
	if _, err := e.agent.Swarm(ctx, r); err == nil || !strings.Contains(err.Error(), "size_bytes") {
		t.Errorf("another size: %v; want refused naming size_bytes", err)
	}

	// Its chunk digests, the concatenated files', recorded with the
	// model once two members verified every file.
	list := []string{strings.Repeat("e", 64), strings.Repeat("f", 64), strings.Repeat("0", 64)}
	r = revReport("n1", hubSrc, rev)
	r.Have = []byte{7}
	r.Sums = map[int]string{0: list[0], 1: list[1], 2: list[2]}
	ask(t, e, r)
	r.Sums, r.Complete = nil, true
	ask(t, e, r)
	r.Node = "n2"
	if p := ask(t, e, r); !p.Recorded {
		t.Errorf("the revision's digest list is not recorded after two complete members")
	}
	if got, err := e.db.ChunkSums(ctx, hubSrc, catalog.RevisionDigest(rev), DefaultSwarmMinChunk); err != nil || strings.Join(got, " ") != strings.Join(list, " ") {
		t.Errorf("recorded %q (%v), want %q", got, err, list)
	}

	set := api.Model{Name: "qwen", Files: []api.File{
		{Source: "https://origin/qwen-00001-of-00002.gguf", Size: DefaultSwarmMinChunk + 3, SHA256: strings.Repeat("1", 64)},
		{Source: "https://origin/qwen-00002-of-00002.gguf", Size: DefaultSwarmMinChunk - 3, SHA256: strings.Repeat("2", 64)},
	}}
	set.Source = set.Files[0].Source
	addModel(t, e, set)
	files, ok := catalog.SetRevision(set)
	if !ok {
		t.Fatal("the set's files are pinned")
	}
	if p := ask(t, e, revReport("n1", set.Source, files)); !p.Lease {
		t.Errorf("the set's revision: lease %v, want it", p.Lease)
	}
	first := api.SwarmReport{Node: "n2", Source: set.Source, SHA256: set.Files[0].SHA256, Size: set.Files[0].Size, ChunkSize: DefaultSwarmMinChunk}
	if p := ask(t, e, first); !p.Lease {
		t.Errorf("the set's first file alone: lease %v, want a swarm of its own", p.Lease)
	}

	// A set with a file not pinned yet has no revision to swarm.
	unpinned := api.Model{Name: "half", Files: []api.File{
		{Source: "https://origin/half-00001-of-00002.gguf", Size: 100, SHA256: strings.Repeat("3", 64)},
		{Source: "https://origin/half-00002-of-00002.gguf", Size: 100},
	}}
	unpinned.Source = unpinned.Files[0].Source
	addModel(t, e, unpinned)
	r = api.SwarmReport{Node: "n1", Source: unpinned.Source, SHA256: strings.Repeat("4", 64), Size: 200, ChunkSize: DefaultSwarmMinChunk}
	if _, err := e.agent.Swarm(ctx, r); err == nil || !strings.Contains(err.Error(), "pins no sha256") {
		t.Errorf("a set with a file not pinned: %v; want refused, the pin missing", err)
	}
}
