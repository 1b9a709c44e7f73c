// Package jsonlite reads and writes the few JSON files the Slurm hook's fast path
// needs (the resolved configuration copy, the node-local catalog copy)
// without encoding/json's reflection.
//
// The hook binary starts on every job, and encoding/json's first Unmarshal
// into a struct builds its field tables by reflection: about 140 µs for
// nodeconf.Agent, cold, on every start (measured in-process), a tenth of a
// shell hook's whole run. A decoder written for one struct costs a few
// microseconds.
//
// It is strict and declines rather than guesses: every method returns
// false at anything it is not sure encoding/json would read the same way
// (invalid UTF-8, a lone surrogate, a null in an array, a duplicate or
// case-folded field name, a number that is not a plain integer, trailing
// data), and the caller then decodes the same bytes with encoding/json,
// which gives the answer or the error it always gave. So a file decodes to
// exactly what encoding/json gives, or goes the slow way; the decoders'
// fuzz tests hold each against encoding/json.
package jsonlite

import (
	"math"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads one JSON document from b.
type Scanner struct {
	b []byte
	i int
}

// New returns a scanner at the start of b.
func New(b []byte) *Scanner { return &Scanner{b: b} }

func (s *Scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (s *Scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// End reports whether only white space is left.
func (s *Scanner) End() bool {
	s.ws()
	return s.i == len(s.b)
}

// Object reads an object, calling field for each name whose value is not
// null; field must read the value (or return false to decline). Duplicate names decline: encoding/json
// merges them in ways not worth copying.
func (s *Scanner) Object(field func(name string) bool) bool {
	if more, ok := s.open(); !more {
		return ok
	}
	var seen []string
	for {
		name, ok := s.String()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		for _, n := range seen {
			if n == name {
				return false
			}
		}
		seen = append(seen, name)
		if end, ok := s.member(func() bool { return field(name) }); !ok || end {
			return ok
		}
	}
}

// open reads an object's opening brace: more says members follow, ok
// that it is an object at all ({} is one, with no member).
func (s *Scanner) open() (more, ok bool) {
	if s.peek() != '{' {
		return false, false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return false, true
	}
	return true, true
}

// member reads a member's value with read, or a null, and what follows it:
// end says the object ended there. A null leaves any field as it was,
// which for the fresh structs decoded here is its zero value, whatever the
// field's type or name (encoding/json sets a slice to nil, and ignores
// null for the rest, time.Time included).
func (s *Scanner) member(read func() bool) (end, ok bool) {
	if s.peek() == 'n' {
		if !s.literal("null") {
			return false, false
		}
	} else if !read() {
		return false, false
	}
	switch s.peek() {
	case ',':
		s.i++
		return false, true
	case '}':
		s.i++
		return true, true
	}
	return false, false
}

// Fields reads an object whose member names are all among names (at most
// 64), each written as it is there, without escapes; field(i) reads the
// value of names[i]. It is Object for a struct that refuses unknown
// members, without an allocation per member: any other name declines
// (encoding/json would match it case-insensitively, or refuse it), and
// so does a name given twice. A null value leaves the member as it was.
func (s *Scanner) Fields(names []string, field func(i int) bool) bool {
	if more, ok := s.open(); !more {
		return ok
	}
	var seen uint64
	for {
		name, ok := s.plainName()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		i := 0
		for i < len(names) && names[i] != string(name) {
			i++
		}
		if i == len(names) || i >= 64 || seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		if end, ok := s.member(func() bool { return field(i) }); !ok || end {
			return ok
		}
	}
}

// plainName reads a string of printable ASCII without escapes, as a member
// name the caller compares, not keeps; anything else declines.
func (s *Scanner) plainName() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			s.i++
			return s.b[start : s.i-1], true
		}
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// Array reads an array, calling elem to read each element.
func (s *Scanner) Array(elem func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// Strings reads an array of strings; [] gives an empty, non-nil slice, as
// encoding/json does.
func (s *Scanner) Strings() ([]string, bool) {
	v := []string{}
	ok := s.Array(func() bool {
		x, ok := s.String()
		v = append(v, x)
		return ok
	})
	return v, ok
}

// String reads a string. It declines invalid UTF-8 and lone surrogates,
// which encoding/json would replace with U+FFFD.
func (s *Scanner) String() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	s.i++
	start := s.i
	// The common case, no escape: one allocation. The loop runs on a
	// local slice, which the compiler keeps in registers (through s it
	// reloaded both on every byte, and strings are most of a report).
	rest := s.b[start:]
	for j, c := range rest {
		switch {
		case c == '"':
			v := rest[:j]
			s.i = start + j + 1
			if !utf8.Valid(v) {
				return "", false
			}
			return string(v), true
		case c == '\\':
			s.i = start + j
			return s.escaped(start)
		case c < 0x20:
			return "", false
		}
	}
	return "", false
}

func (s *Scanner) escaped(start int) (string, bool) {
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return "", false
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				if s.i+1 >= len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
					return "", false
				}
				s.i += 2
				r2, ok := s.hex4()
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (s *Scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	s.i += 4
	return r, true
}

// RawString returns a string token as it is written, quotes included, for
// a type's own UnmarshalJSON (time.Time's).
func (s *Scanner) RawString() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	start := s.i
	if _, ok := s.String(); !ok {
		return nil, false
	}
	return s.b[start:s.i], true
}

// integer reads the next number if it is written as a JSON integer
// (-?(0|[1-9][0-9]*)), as its sign and magnitude; a fraction, an exponent
// or a magnitude of 2^64 or more declines.
func (s *Scanner) integer() (neg bool, u uint64, ok bool) {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '-' {
		neg = true
		s.i++
	}
	d := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == d || s.b[d] == '0' && s.i-d > 1 {
		return false, 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return false, 0, false
		}
	}
	digits := s.b[d:s.i]
	if len(digits) > 20 {
		return false, 0, false
	}
	// Read without a string, so without an allocation per number.
	for _, c := range digits {
		v := u*10 + uint64(c-'0')
		if u > math.MaxUint64/10 || v < u*10 {
			return false, 0, false
		}
		u = v
	}
	return neg, u, true
}

// Int reads an integer that fits in bits bits.
func (s *Scanner) Int(bits int) (int64, bool) {
	neg, u, ok := s.integer()
	limit := uint64(1) << (bits - 1)
	switch {
	case !ok:
		return 0, false
	case neg && u <= limit:
		return int64(-u), true
	case !neg && u < limit:
		return int64(u), true
	}
	return 0, false
}

// Uint reads an unsigned integer that fits in bits bits.
func (s *Scanner) Uint(bits int) (uint64, bool) {
	neg, u, ok := s.integer()
	if !ok || neg || bits < 64 && u >= uint64(1)<<bits {
		return 0, false
	}
	return u, true
}

// Skip reads any value, for a field the caller does not know, which
// encoding/json ignores too (but only after checking its syntax).
func (s *Scanner) Skip() bool {
	switch c := s.peek(); {
	case c == '{':
		return s.Object(func(string) bool { return s.Skip() })
	case c == '[':
		return s.Array(s.Skip)
	case c == '"':
		_, ok := s.String()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

// Bool reads true or false.
func (s *Scanner) Bool() (v, ok bool) {
	switch s.peek() {
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	}
	return false, false
}

func (s *Scanner) literal(l string) bool {
	if len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// number reads any JSON number.
func (s *Scanner) number() bool {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.b[s.i] == '-' {
		s.i++
	}
	d := s.i
	if n := digits(); n == 0 || s.b[d] == '0' && n > 1 {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// Unknown reports whether a field called name may be skipped as unknown
// to a struct whose fields are called known: encoding/json matches names
// case-insensitively, with Unicode folds, so a name that is not ASCII, or
// that equals a known name but for case, declines.
func Unknown(name string, known ...string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return false
		}
	}
	// Both are ASCII here (known are field names), where EqualFold is
	// ASCII case folding.
	for _, k := range known {
		if strings.EqualFold(name, k) {
			return false
		}
	}
	return true
}

const hex = "0123456789abcdef"

// AppendString appends s as a JSON string, byte for byte as json.Marshal
// writes it (Go 1.27's, which is encoding/json/v2's in v1 mode): <, > and &
// escaped for HTML, each invalid UTF-8 byte replaced by U+FFFD (unescaped),
// U+2028 and U+2029 escaped.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\ufffd"...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
