package api

import "testing"

func TestStripControl(t *testing.T) {
	for in, want := range map[string]string{
		"plain":              "plain",
		"\x1b[2J\x1b[31mred": "[2J[31mred",
		"a\nn9  ok  fake":    "a n9  ok  fake",
		"tab\there":          "tab here",
		"c1\u009b31m":        "c131m",
		"bidi\u202eevil":     "bidievil",
		"bad\xffutf8":        "bad\uFFFDutf8",
		"del\x7f":            "del",
		"ünïcode stays":      "ünïcode stays",
	} {
		if got := StripControl(in); got != want {
			t.Errorf("StripControl(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEscapeControl(t *testing.T) {
	for in, want := range map[string]string{
		"plain":    "plain",
		"\x1b[2J":  `\x1b[2J`,
		"a\nb":     `a\x0ab`,
		"c1\u009b": `c1\u009b`,
		"bad\xff":  `bad\xff`,
		// Without a control character a backslash is left alone; with one
		// it is doubled, so every escape shown came from EscapeControl.
		`a\b`:      `a\b`,
		"a\\b\x1b": `a\\b\x1b`,
	} {
		got := EscapeControl(in)
		if got != want {
			t.Errorf("EscapeControl(%q) = %q, want %q", in, got, want)
		}
		for _, r := range got {
			if isControl(r) {
				t.Errorf("EscapeControl(%q) = %q still holds %U", in, got, r)
			}
		}
	}
}
