package coordinator

import (
	"bytes"
	"encoding/json"
	jsonv2 "encoding/json/v2"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/llmgw/llmgw/api"
)

// decodeReportBody is the handler's way from bytes to a checked report:
// decode, the weights decoded from their raw bytes, then validReport. key
// is the weights' fingerprint.
func decodeReportBody(body []byte) (rep *api.Report, key [32]byte, err error) {
	r := httptest.NewRequest(http.MethodPost, "/v1/reports", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	var wire wireReport
	if err := decode(httptest.NewRecorder(), r, MaxReportBytes, "report", &wire); err != nil {
		return nil, key, err
	}
	rep = &wire.Report
	if err := decodeWeights(wire.Weights.raw, rep); err != nil {
		return nil, key, err
	}
	key = weightsKey(wire.Weights.raw, rep.Cache.Dir)
	if err := validReport(rep); err != nil {
		return nil, key, err
	}
	return rep, key, nil
}

// FuzzReportDecode: whatever a stranger sends, the decoder answers an
// *api.Error or a report within every bound, and a report it took is taken
// again when sent back as JSON (what it normalised stays normal). The seeds
// run in every go test.
func FuzzReportDecode(f *testing.F) {
	valid, _ := json.Marshal(report("n1", "ib-a", 3, api.Weight{Path: "/models/a.gguf", Size: 7, Complete: true}))
	for _, seed := range []string{
		string(valid),
		`{}`,
		`{"node":"n1"}`,
		`{"node":"n1","weights":null}`,
		`{"node":"n1","weights":[{"path":"/a.gguf"},{"path":"/a.gguf/"}]}`,
		`{"node":"n1","weights" : [{"path":"/a.gguf","size":1}] ,"cache":{"dir":"/c"}}`,
		`{"node":"n1","weights":[{"path":"/a.gguf","unknown":1}]}`,
		`{"NODE":"n1","Weights":[{"PATH":"/a.gguf"}]}`,
		`{"weights":[{"path":"/a.gguf"}],"node":"n1"}`,
		`{"node":"n1","weights":[{"path":"/a.gguf"},{"path":"/c.gguf"}],"weights":[{"path":"/b.gguf"}]}`,
		`{"node":"n1","weights":[{"path":"/a.gguf"}],"weights":null}`,
		`{"node":"n1","weights":[{"path":"relative"}]}`,
		`{"node":"n1","seq":-1}`,
		`{"node":"n1","seq":9223372036854775807,"started":"2262-04-11T23:47:16Z"}`,
		`{"node":"n1","fabric":"a\u001b[2Jb"}`,
		`{"node":"../etc","errors":["\u0000x"]}`,
		`{"node":"n1","cache":{"dir":"/c","free_bytes":-1}}`,
		`{"node":"n1","weights":[{"path":"/a","model_id":"` + string(bytes.Repeat([]byte("x"), 300)) + `"}]}`,
		`{"node":"n1","fetches":[{"source":"hf:o/r/f.gguf","bytes_done":-5}]}`,
		`{"node":"n1"} {"node":"n2"}`,
		`{"node":"n1","unknown":1}`,
		`[`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rep, key, err := decodeReportBody(body)
		if err == nil {
			// The fingerprint is of the weights exactly as sent.
			var sent struct {
				Weights json.RawMessage `json:"weights"`
				Cache   api.Cache       `json:"cache"`
			}
			if err := jsonv2.Unmarshal(body, &sent, json.DefaultOptionsV1()); err != nil {
				t.Fatalf("decoding %q again: %v", body, err)
			}
			if want := weightsKey(sent.Weights, sent.Cache.Dir); key != want {
				t.Fatalf("decoding %q: fingerprinted other bytes than the weights %q", body, sent.Weights)
			}
		}
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || api.HTTPStatus(ae.Code)/100 != 4 {
				t.Fatalf("decoding %q: %v (%T), want a 4xx *api.Error", body, err, err)
			}
			return
		}
		if api.ValidNodeName(rep.Node) != nil || api.ValidFabricName(rep.Fabric) != nil {
			t.Fatalf("took a report with node %q, fabric %q", rep.Node, rep.Fabric)
		}
		if len(rep.Weights) > MaxWeights || len(rep.Fetches) > MaxFetches || len(rep.Dirs) > MaxDirs || len(rep.Errors) > maxErrors {
			t.Fatalf("took a report over the bounds: %d weights, %d fetches, %d dirs, %d errors",
				len(rep.Weights), len(rep.Fetches), len(rep.Dirs), len(rep.Errors))
		}
		for _, e := range rep.Errors {
			if !utf8.ValidString(e) || len(e) > maxErrorText+len("…") {
				t.Fatalf("kept an error line of %d bytes or not UTF-8: %q", len(e), e)
			}
		}
		again, err := json.Marshal(rep)
		if err != nil {
			t.Fatalf("re-encoding a report taken: %v", err)
		}
		if _, _, err := decodeReportBody(again); err != nil {
			t.Fatalf("a report taken (%q) is refused when sent again as %q: %v", body, again, err)
		}
	})
}
