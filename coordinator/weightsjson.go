package coordinator

import (
	"bytes"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/internal/jsonlite"
)

// weightFields are api.Weight's JSON names, in weightsLite's order.
var weightFields = []string{"path", "size_bytes", "shared", "complete", "problem", "model_id", "revision"}

// weightsLite decodes a report's weights (a JSON array of api.Weight) as
// unmarshalStrict does, or returns false; see package jsonlite. Decoding
// a node's 50 weights through encoding/json's reflection was the largest
// single cost of a first report (about 50 µs of the 300 µs a first report
// with MUNGE costs the coordinator); this reads them in a few, with one
// allocation per string and one for the slice. It takes only the form
// agents write: member names exactly as tagged, each once, integers as
// integers, valid UTF-8. Anything else (a name in another case, an
// unknown member, a null element, an escape in a name) declines, and
// decodeWeights gives the bytes to encoding/json, which takes or refuses
// them as it always did. weightsjson_test.go's fuzz test holds the two
// equal.
func weightsLite(raw []byte) ([]api.Weight, bool) {
	s := jsonlite.New(raw)
	ws := make([]api.Weight, 0, countWeights(raw))
	ok := s.Array(func() bool {
		ws = append(ws, api.Weight{})
		w := &ws[len(ws)-1]
		return s.Fields(weightFields, func(i int) bool {
			var ok bool
			switch i {
			case 0:
				w.Path, ok = s.String()
			case 1:
				w.Size, ok = s.Int(64)
			case 2:
				w.Shared, ok = s.Bool()
			case 3:
				w.Complete, ok = s.Bool()
			case 4:
				w.Problem, ok = s.String()
			case 5:
				w.ModelID, ok = s.String()
			case 6:
				w.Revision, ok = s.String()
			}
			return ok
		})
	})
	return ws, ok && s.End()
}

// countWeights guesses how many weights raw lists, to size the slice once:
// the objects in it, counted as their opening braces. A brace inside a
// string only over-counts, and the guess is bounded by MaxWeights.
func countWeights(raw []byte) int {
	return min(bytes.Count(raw, []byte{'{'}), MaxWeights+1)
}
