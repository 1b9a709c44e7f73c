package jsonlite

import (
	"encoding/json"
	"testing"
)

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "<&>", "\"\\/", "\b\f\n\r\t\x00\x1f\x7f", "é\u2028\u2029😀", "\xff\xfe", "a\xc3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, json.Marshal gives %s", s, got, want)
		}
		// What AppendString writes, String reads back, unless it is not
		// valid UTF-8 (which json.Marshal replaced with U+FFFD).
		got, ok := New(want).String()
		var back string
		json.Unmarshal(want, &back)
		if !ok || got != back {
			t.Fatalf("String(%s) = %q, %v; json.Unmarshal gives %q", want, got, ok, back)
		}
	})
}

// FuzzSkip holds Skip to encoding/json's syntax: whatever Skip reads whole
// is valid JSON. It must never panic, whatever the input.
func FuzzSkip(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,-0.5e+3,true,false,null,"x\u00e9",{"b":{}}]}`, `01`, `1.`, `-`, `"\u12"`, `[1,]`, `{"a":1,}`, `tru`, `nul`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := New(b)
		if s.Skip() && s.End() && !json.Valid(b) {
			t.Fatalf("Skip read %q, which is not valid JSON", b)
		}
	})
}
