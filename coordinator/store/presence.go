package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/weights/catalog"
)

// A node's presence is one JSON array in presence.weights, one object per
// reported weight (see migrations/0001_init.sql for its fields). A report
// replaces everything its node said before and nothing ever changes one
// weight alone, so the array is the unit SQLite stores: one row written per
// changed report instead of fifty, which made a node's first report several
// times cheaper. It is JSON text, not a private encoding, so that an admin
// can still ask SQLite about it with json_each.
//
// The store writes the text itself (appendWeights) and reads it back with a
// decoder for exactly that shape (decodeWeights): encoding/json spent more
// time on 10,000 nodes' arrays than SQLite spends storing them. Anything
// the fast decoder does not expect (an escaped string, whitespace, a value
// an admin rewrote) goes through encoding/json instead, so it is only ever
// slower, never wrong.

// weightJSON is one element of a presence array as encoding/json reads it:
// the slow path of decodeWeights, and the definition of the format the
// fast paths must agree with (TestWeightsFormat holds them to it). Its
// names are api.Weight's, so a report and the database spell a weight
// alike, plus the catalog model.
type weightJSON struct {
	Path     string `json:"path"`
	Size     int64  `json:"size_bytes"`
	Shared   bool   `json:"shared"`
	Complete bool   `json:"complete"`
	Problem  string `json:"problem,omitempty"`
	ModelID  string `json:"model_id,omitempty"`
	Revision string `json:"revision,omitempty"`
	Model    string `json:"model,omitempty"`
}

// appendWeights appends ws, whose catalog models are models[i], as a JSON
// array. The output is what json.Marshal of []weightJSON with HTML escaping
// off gives; the needles of rematch rely on strings being encoded by
// appendString alone.
func appendWeights(b []byte, ws []api.Weight, models []string) []byte {
	b = append(b, '[')
	for i := range ws {
		w := &ws[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"path":`...)
		b = appendString(b, w.Path)
		b = append(b, `,"size_bytes":`...)
		b = strconv.AppendInt(b, w.Size, 10)
		b = append(b, `,"shared":`...)
		b = strconv.AppendBool(b, w.Shared)
		b = append(b, `,"complete":`...)
		b = strconv.AppendBool(b, w.Complete)
		for _, f := range [...]struct{ key, v string }{
			{`,"problem":`, w.Problem}, {`,"model_id":`, w.ModelID},
			{`,"revision":`, w.Revision}, {`,"model":`, models[i]},
		} {
			if f.v != "" {
				b = append(b, f.key...)
				b = appendString(b, f.v)
			}
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does: SQLite's JSON functions must be able to read the array.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendStringBody(b, s)
	return append(b, '"')
}

func appendStringBody(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
		}
		b = append(b, s[start:i]...)
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default: // an invalid UTF-8 byte
			b = append(b, "\ufffd"...)
		}
		i++
		start = i
	}
	return append(b, s[start:]...)
}

// interner shares the strings of many decoded arrays: the same paths and
// model names recur on thousands of nodes, and the in-memory view keeps
// them all.
type interner map[string]string

func (in interner) get(b string) string {
	if s, ok := in[b]; ok {
		return s
	}
	s := strings.Clone(b)
	in[s] = s
	return s
}

var errSlowPath = errors.New("not the store's own encoding")

// decodeWeights decodes one presence array into buf[:0], which it returns
// (grown as needed): a caller decoding many arrays reuses one buffer. in may
// be nil.
func decodeWeights(s string, in interner, buf []Presence) ([]Presence, error) {
	if ps, err := decodeFast(s, in, buf[:0]); err == nil {
		return ps, nil
	}
	var ws []weightJSON
	if err := json.Unmarshal([]byte(s), &ws); err != nil {
		return nil, fmt.Errorf("presence array: %w", err)
	}
	ps := buf[:0]
	for _, w := range ws {
		ps = append(ps, Presence{Path: w.Path, Size: w.Size, Shared: w.Shared, Complete: w.Complete,
			Problem: w.Problem, ModelID: w.ModelID, Revision: w.Revision, Model: w.Model})
	}
	if ps == nil {
		ps = []Presence{}
	}
	return ps, nil
}

// decodeFast reads what appendWeights writes, appending to ps, and fails
// with errSlowPath on anything else.
func decodeFast(s string, in interner, ps []Presence) ([]Presence, error) {
	d := fastDecoder{s: s, in: in}
	if !d.lit("[") {
		return nil, errSlowPath
	}
	if ps == nil {
		ps = []Presence{}
	}
	if d.lit("]") {
		return ps, d.end()
	}
	for {
		ps = append(ps, Presence{})
		p := &ps[len(ps)-1]
		if !d.lit(`{"path":`) {
			return nil, errSlowPath
		}
		p.Path = d.str()
		p.Size = d.int(`,"size_bytes":`)
		p.Shared = d.bool(`,"shared":`)
		p.Complete = d.bool(`,"complete":`)
		if d.lit(`,"problem":`) {
			p.Problem = d.str()
		}
		if d.lit(`,"model_id":`) {
			p.ModelID = d.str()
		}
		if d.lit(`,"revision":`) {
			p.Revision = d.str()
		}
		if d.lit(`,"model":`) {
			p.Model = d.str()
		}
		if !d.lit("}") || d.bad {
			return nil, errSlowPath
		}
		if d.lit("]") {
			return ps, d.end()
		}
		if !d.lit(",") {
			return nil, errSlowPath
		}
	}
}

type fastDecoder struct {
	s   string
	i   int
	bad bool
	in  interner
}

func (d *fastDecoder) lit(l string) bool {
	if strings.HasPrefix(d.s[d.i:], l) {
		d.i += len(l)
		return true
	}
	return false
}

func (d *fastDecoder) end() error {
	if d.bad || d.i != len(d.s) {
		return errSlowPath
	}
	return nil
}

// str reads a string without escapes (the slow path has those).
func (d *fastDecoder) str() string {
	if d.bad || !d.lit(`"`) {
		d.bad = true
		return ""
	}
	j := strings.IndexAny(d.s[d.i:], `"\`)
	if j < 0 || d.s[d.i+j] != '"' {
		d.bad = true
		return ""
	}
	v := d.s[d.i : d.i+j]
	d.i += j + 1
	if d.in != nil {
		return d.in.get(v)
	}
	return strings.Clone(v)
}

func (d *fastDecoder) int(key string) int64 {
	if d.bad || !d.lit(key) {
		d.bad = true
		return 0
	}
	j := d.i
	for j < len(d.s) && (d.s[j] == '-' || d.s[j] >= '0' && d.s[j] <= '9') {
		j++
	}
	n, err := strconv.ParseInt(d.s[d.i:j], 10, 64)
	if err != nil {
		d.bad = true
	}
	d.i = j
	return n
}

func (d *fastDecoder) bool(key string) bool {
	if d.bad || !d.lit(key) {
		d.bad = true
		return false
	}
	switch {
	case d.lit("true"):
		return true
	case d.lit("false"):
		return false
	}
	d.bad = true
	return false
}

// needles returns strings of which a presence array that has weights m
// (by the rules of matcher) contains at least one, as appendWeights writes
// it. Rematch decodes only the arrays that contain a needle: finding a
// substring is a hundred times cheaper than decoding, and a catalog change
// concerns few nodes' weights.
func needles(m api.Model) []string {
	if m.IsHub() {
		// A snapshot of the repository at the commit, wherever it is.
		return []string{`"model_id":` + string(appendString(nil, m.Hub.Repo)) + `,"revision":` + string(appendString(nil, m.Hub.Commit))}
	}
	switch catalog.KindOf(m.Source) {
	case catalog.KindPath:
		// The path itself, or a directory above it (see matcher.below).
		src := filepath.Clean(m.Source)
		out := []string{`"path":` + string(appendString(nil, src))}
		for _, dir := range ancestors(src) {
			out = append(out, `"path":`+string(appendString(nil, dir)))
		}
		return out
	case catalog.KindRemote:
		// The file in any node's cache dir: the path ends with its name;
		// for a model of several files, the set directory's name.
		base := catalog.CacheName(m.Source)
		if m.IsSet() {
			base = catalog.SetName(m)
		}
		return []string{"/" + string(appendStringBody(nil, base)) + `"`}
	case catalog.KindModelID:
		// Either the id itself or "id@revision": the model_id field starts
		// with what precedes the first '@' either way.
		id, _, _ := strings.Cut(m.Source, "@")
		return []string{`"model_id":"` + string(appendStringBody(nil, id))}
	}
	return nil
}

// modelNeedle is the needle of the weights stored as catalog model name.
func modelNeedle(name string) string {
	return `"model":` + string(appendString(nil, name))
}

// rematch brings the stored catalog models of every node's presence in line
// with match, after a catalog change. Only arrays that hold one of the
// needles are decoded: the weights of a model that was removed or moved
// (`"model":"name"`) and those the new or moved entry may be (see needles).
// Every other weight's model is the same under the old and the new catalog.
//
// Each candidate is matched afresh by the same rules as ingest, so a
// node's stored models are always what its last report would get if it
// arrived now.
func rematch(ctx context.Context, tx *sql.Tx, match *matcher, needles []string) error {
	if len(needles) == 0 {
		return nil
	}
	// SQLite finds the candidates: handing every array to Go only to look
	// for a substring cost more than the search.
	where := make([]string, len(needles))
	args := make([]any, len(needles))
	for i, n := range needles {
		where[i] = "instr(p.weights, ?) > 0"
		args[i] = n
	}
	rows, err := tx.QueryContext(ctx, `SELECT p.node, n.cache_dir, p.weights FROM presence p
		JOIN nodes n ON n.name = p.node WHERE `+strings.Join(where, " OR "), args...)
	if err != nil {
		return err
	}
	type change struct{ node, weights string }
	var changes []change
	for rows.Next() {
		var node, dir, arr string
		if err := rows.Scan(&node, &dir, &arr); err != nil {
			rows.Close()
			return err
		}
		ps, err := decodeWeights(arr, nil, nil)
		if err != nil {
			rows.Close()
			return fmt.Errorf("node %s: %w", node, err)
		}
		ws := make([]api.Weight, len(ps))
		models := make([]string, len(ps))
		changed := false
		for i, p := range ps {
			ws[i] = api.Weight{Path: p.Path, Size: p.Size, Shared: p.Shared, Complete: p.Complete,
				Problem: p.Problem, ModelID: p.ModelID, Revision: p.Revision}
			models[i] = match.model(dir, &ws[i])
			changed = changed || models[i] != p.Model
		}
		if changed {
			changes = append(changes, change{node, string(appendWeights(nil, ws, models))})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(changes) == 0 {
		return nil
	}
	st, err := tx.PrepareContext(ctx, `UPDATE presence SET weights = ? WHERE node = ?`)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, c := range changes {
		if _, err := st.ExecContext(ctx, c.weights, c.node); err != nil {
			return fmt.Errorf("node %s: %w", c.node, err)
		}
	}
	return nil
}
