package jsonlite

import (
	"encoding/json"
	"strconv"
	"strings"
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

// FuzzInt holds Int and Uint to strconv on JSON integers: what they read,
// strconv reads the same, and what strconv reads of a plain JSON integer,
// they read too, at every width the decoders use.
func FuzzInt(f *testing.F) {
	for _, s := range []string{"0", "-0", "1", "-1", "01", "1.0", "1e3", "127", "128", "-128", "-129", "255", "256",
		"4294967295", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
		"-9223372036854775809", "18446744073709551615", "18446744073709551616", "99999999999999999999", "100000000000000000000"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// strconv reads the number alone; JSON allows blanks around it.
		n := strings.Trim(string(b), " \t\r\n")
		plain := json.Valid(b) && !strings.ContainsAny(n, ".eE") && n != "" && (n[0] == '-' || n[0] >= '0' && n[0] <= '9')
		for _, bits := range []int{8, 16, 32, 64} {
			s := New(b)
			v, ok := s.Int(bits)
			ok = ok && s.End() // the rest is the caller's to judge
			want, err := strconv.ParseInt(n, 10, bits)
			if ok && (err != nil || v != want) || !ok && plain && err == nil {
				t.Fatalf("Int(%q, %d) = %d, %v; strconv gives %d, %v", b, bits, v, ok, want, err)
			}
			s = New(b)
			u, ok := s.Uint(bits)
			ok = ok && s.End()
			wantU, err := strconv.ParseUint(n, 10, bits)
			if ok && (err != nil || u != wantU) || !ok && plain && err == nil {
				t.Fatalf("Uint(%q, %d) = %d, %v; strconv gives %d, %v", b, bits, u, ok, wantU, err)
			}
		}
	})
}
