package placement

import (
	"testing"

	"github.com/llmgw/llmgw/weights/catalog"
)

// A model of several files is fetched one file after another: the node's
// fetch of it is the fetch of whichever file is under way, so status and
// placement say the node is fetching it.
func TestFindModelFetch(t *testing.T) {
	m := catalog.Model{Name: "m", Source: "hf:o/r/w-00001-of-00002.gguf", Files: []catalog.File{
		{Source: "hf:o/r/w-00001-of-00002.gguf"}, {Source: "hf:o/r/w-00002-of-00002.gguf"},
	}}
	n := &Node{Fetches: []Fetch{{Source: "hf:o/r/other.gguf"}, {Source: "hf:o/r/w-00002-of-00002.gguf", Done: 5}}}
	if f := n.FindModelFetch(m); f == nil || f.Source != m.Files[1].Source {
		t.Errorf("FindModelFetch = %+v; want the second file's fetch", f)
	}
	if f := n.FindModelFetch(catalog.Model{Name: "x", Source: "hf:o/r/x.gguf"}); f != nil {
		t.Errorf("FindModelFetch of a model not being fetched = %+v", f)
	}
}
