package coordinator

import (
	"context"
	"encoding/hex"
	"math/bits"
	"strings"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// What a swarm report may say (issue 24): a swarm exists only for a file
// the catalog pins, and the file's size, its chunk size and so every chunk
// index are the coordinator's, never the first reporter's. A reporter that
// squatted a swarm with another size or chunk size turned every honest
// report away (size) or crashed every later report of the swarm (a chunk
// index past the end).

// catalogFile is one fetched file of the catalog as a swarm needs it: the
// model it belongs to, its size and its pinned sha256 (declared, else
// pinned by the first verified fetch).
type catalogFile struct {
	model  string
	size   int64
	sha256 string
}

// catalogFiles indexes the remote files of models by source: a model of one
// source, and each file of a model of several (catalog_files).
func catalogFiles(models []api.Model) map[string]catalogFile {
	out := make(map[string]catalogFile, len(models))
	for _, m := range models {
		if m.IsSet() {
			for _, f := range m.Files {
				out[f.Source] = catalogFile{model: m.Name, size: f.Size, sha256: strings.ToLower(f.WantSHA256())}
			}
			continue
		}
		if catalog.KindOf(m.Source) == catalog.KindRemote && !m.IsHub() {
			out[m.Source] = catalogFile{model: m.Name, size: m.Size, sha256: strings.ToLower(m.WantSHA256())}
		}
	}
	return out
}

// swarmFile is the file r names as the catalog has it, or why a swarm of it
// cannot be: no entry for the source, another sha256 (the node's catalog
// copy is older than a repin, or the node lies), no size, or another size.
func (s *Server) swarmFile(r *api.SwarmReport) (catalogFile, error) {
	s.view.mu.RLock()
	f, ok := s.view.files[r.Source]
	if rv, isRev := s.view.revisions[r.Source]; isRev && (!ok || f.sha256 != r.SHA256) {
		// A model of several files, as one revision (swarmrev.go).
		f, ok = rv, true
	}
	s.view.mu.RUnlock()
	src := api.RedactSource(r.Source)
	switch {
	case !ok:
		return f, api.Errorf(api.CodeNotFound, "swarm report from %s: %s is no file of the catalog; a swarm is only for a catalog model's pinned file ('llmgw models list')", r.Node, src)
	case f.sha256 == "":
		return f, api.Errorf(api.CodeConflict, "swarm report from %s: model %s pins no sha256 for %s yet; a swarm needs the pin (llmgw models add --sha256, or a first verified fetch)", r.Node, f.model, src)
	case f.sha256 != r.SHA256:
		return f, api.Errorf(api.CodeConflict, "swarm report from %s: model %s is pinned to sha256 %s for %s, not %s; the node's catalog copy is older than the pin, and refreshes within a report interval", r.Node, f.model, f.sha256, src, r.SHA256)
	case f.size <= 0:
		return f, api.Errorf(api.CodeConflict, "swarm report from %s: model %s gives no size_bytes for %s; a swarm needs the pinned size (llmgw models add --size)", r.Node, f.model, src)
	case f.size != r.Size:
		return f, api.Errorf(api.CodeInvalid, "swarm report from %s: size_bytes %d, but model %s's %s is %d bytes", r.Node, r.Size, f.model, src, f.size)
	}
	return f, nil
}

// swarmChunk is the chunk size of a swarm of a file of size bytes: the
// configured one (swarm_min_chunk), or, for a file that would need more
// than maxChunks of it, the smallest whole number of MiB that keeps it
// within maxChunks; 0 when even SwarmMaxChunk does not.
func swarmChunk(size, configured int64) int64 {
	c := configured
	if (size+c-1)/c > maxChunks {
		c = ((size+maxChunks-1)/maxChunks + 1<<20 - 1) &^ (1<<20 - 1)
	}
	if c > SwarmMaxChunk && c > configured {
		return 0
	}
	return c
}

// validSwarmReport refuses what no swarm can be made of, naming the field:
// the text fields' syntax. What the catalog decides (the file, its size)
// is swarmFile's, and the chunk indexes checkChunks'.
func validSwarmReport(r *api.SwarmReport) error {
	if r.Node == "" {
		return api.Errorf(api.CodeInvalid, "swarm report: node is empty")
	}
	if err := shortText("node", r.Node); err != nil {
		return err
	}
	if r.Source == "" {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: source is empty", r.Node)
	}
	if len(r.Source) > 4096 {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: source is over 4096 bytes", r.Node)
	}
	if !validDigest(r.SHA256) {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: sha256 %.80q is not 64 lowercase hex digits; a swarm needs the pinned digest (llmgw models add --sha256)", r.Node, r.SHA256)
	}
	if r.Size <= 0 {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: size_bytes %d must be positive", r.Node, r.Size)
	}
	if r.ChunkSize <= 0 || r.ChunkSize > SwarmMaxChunk {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: chunk_size %d is outside 1-%d bytes", r.Node, r.ChunkSize, SwarmMaxChunk)
	}
	if len(r.Bad) > 64 || len(r.Unreachable) > 64 {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: more than 64 bad or unreachable peers", r.Node)
	}
	if len(r.Validator) > 1024 {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: validator is over 1024 bytes", r.Node)
	}
	if len(r.Sums) > maxChunks {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: %d sums; a swarm has at most %d chunks", r.Node, len(r.Sums), maxChunks)
	}
	for i, s := range r.Sums {
		if !validDigest(s) {
			return api.Errorf(api.CodeInvalid, "swarm report from %s: sums[%d] is not 64 lowercase hex digits", r.Node, i)
		}
	}
	if len(r.Mismatch) > maxChunks {
		return api.Errorf(api.CodeInvalid, "swarm report from %s: mismatch lists %d digests; a swarm has at most %d chunks", r.Node, len(r.Mismatch), maxChunks)
	}
	for i, s := range r.Mismatch {
		if s != "" && !validDigest(s) {
			return api.Errorf(api.CodeInvalid, "swarm report from %s: mismatch[%d] is neither empty nor 64 lowercase hex digits", r.Node, i)
		}
	}
	return nil
}

// checkChunks refuses chunk indexes that are not the swarm's: a report
// with another chunk size that marks chunks (a member that verified chunks
// of another size cannot be offered as a peer, nor its digests taken), and
// indexes past the file's last chunk. A report with another chunk size and
// nothing marked is a member that has not started (its plan tells it the
// chunk size), and a complete one serves any range whatever its chunks
// were. ok says the report's Have and Sums may be read.
func checkChunks(r *api.SwarmReport, chunkSize int64, chunks int) (ok bool, err error) {
	if r.ChunkSize != chunkSize {
		if !r.Complete && (len(r.Sums) > 0 || countBits(r.Have) > 0) {
			return false, api.Errorf(api.CodeInvalid, "swarm report from %s: chunk_size %d, but this coordinator's swarm of the file is in %d-byte chunks (swarm_min_chunk); chunks of another size mean other bytes under the same index: start the fetch again (remove its .part and .part.swarm)", r.Node, r.ChunkSize, chunkSize)
		}
		return false, nil
	}
	if len(r.Have) > (chunks+7)/8 {
		return false, api.Errorf(api.CodeInvalid, "swarm report from %s: have is %d bytes; %d chunks need at most %d", r.Node, len(r.Have), chunks, (chunks+7)/8)
	}
	if len(r.Have) == (chunks+7)/8 && chunks%8 != 0 && r.Have[len(r.Have)-1]>>(chunks%8) != 0 {
		return false, api.Errorf(api.CodeInvalid, "swarm report from %s: have marks chunks beyond the last (%d)", r.Node, chunks-1)
	}
	for i := range r.Sums {
		if i < 0 || i >= chunks {
			return false, api.Errorf(api.CodeInvalid, "swarm report from %s: sums has chunk %d; the file has chunks 0-%d", r.Node, i, chunks-1)
		}
	}
	if len(r.Mismatch) > chunks {
		return false, api.Errorf(api.CodeInvalid, "swarm report from %s: mismatch lists %d digests; the file has %d chunks", r.Node, len(r.Mismatch), chunks)
	}
	return true, nil
}

func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && s == strings.ToLower(s)
}

func countBits(b []byte) int {
	n := 0
	for _, x := range b {
		n += bits.OnesCount8(x)
	}
	return n
}

// swarmFabric is node's fabric for its swarms: Slurm's when
// fabric_features is set (slurmFabric), else its last report's. A node
// whose last report named another fabric than Slurm's now has the
// report's word overruled by Slurm's and is told so.
func (s *Server) swarmFabric(ctx context.Context, r *api.SwarmReport) (string, error) {
	s.view.mu.RLock()
	vn := s.view.nodes[r.Node]
	fabric := ""
	if vn != nil {
		fabric = vn.Fabric
	}
	s.view.mu.RUnlock()
	if vn == nil {
		return "", api.Errorf(api.CodeConflict, "node %s has not reported yet; its agent must report (POST /v1/reports) before it joins a swarm", r.Node)
	}
	if fabric == "" {
		fabric = DefaultFabric
	}
	if len(s.cfg.FabricFeatures) == 0 {
		return fabric, nil
	}
	return s.checkFabric(ctx, r.Node, fabric)
}

// checkFabric compares fabric, what node says of itself, with Slurm's word,
// and returns Slurm's or the refusal that says what to fix.
func (s *Server) checkFabric(ctx context.Context, node, fabric string) (string, error) {
	want, err := s.slurmFabric(ctx, node)
	if err != nil {
		return "", err
	}
	if want != fabric {
		has := "none of fabric_features (" + strings.Join(s.cfg.FabricFeatures, ", ") + ") among its features, which is the fabric " + DefaultFabric
		if want != DefaultFabric {
			has = "feature " + want
		}
		return "", api.Errorf(api.CodeInvalid, "report from %s: fabric %q, but Slurm lists %s with %s; a node's fabric is Slurm's word (coordinator.toml fabric_features): set fabric = %q in %s's agent.toml, or correct its Feature= in slurm.conf",
			node, fabric, node, has, want, node)
	}
	return want, nil
}
