package coordinator

import (
	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// A model of several files (a Hub repository at one commit, a set of
// http(s) files) is one swarm per fabric, as one revision (issue 25,
// weights/catalog/revision.go): its files end to end, one lease, chunks
// that may span two files. The swarm's key is still the catalog's, never a
// member's (issue 24): the model's source, the revision digest of its
// ordered file list (names, sizes, digests) and the sum of the sizes, all
// computed here from the catalog entry. Everything else a swarm does
// (leases, digests, the recorded list, plans) is the same code as for one
// file: a revision is a file whose bytes happen to land in several.
//
// A set's source is its first file's, which is also a swarm of that file
// alone (the set's files stay catalog files, one by one, for an agent that
// fetches them so): the two are told apart by the sha256, the file's pin
// or the revision digest (swarmFile).

// catalogRevisions indexes the models of several files by source, each as
// its revision. A set whose files are not all pinned and sized yet is
// indexed with no sha256, so that a report of it is refused saying so.
func catalogRevisions(models []api.Model) map[string]catalogFile {
	out := map[string]catalogFile{}
	for _, m := range models {
		var files []catalog.RevisionFile
		switch {
		case m.IsHub():
			files = catalog.HubRevision(*m.Hub)
		case m.IsSet():
			var ok bool
			if files, ok = catalog.SetRevision(m); !ok {
				out[m.Source] = catalogFile{model: m.Name, size: 0, sha256: ""}
				continue
			}
		default:
			continue
		}
		out[m.Source] = catalogFile{model: m.Name, size: catalog.RevisionSize(files), sha256: catalog.RevisionDigest(files)}
	}
	return out
}
