package catalog

import (
	"strings"
	"testing"
)

func TestCheckAbsPath(t *testing.T) {
	for p, want := range map[string]string{
		"/var/cache/llmgw":              "",
		"/":                             "",
		"":                              "cache dir is empty",
		"cache":                         `cache dir "cache" is relative, not absolute`,
		"./cache":                       "is relative",
		"/a\x00b":                       "contains NUL",
		"/a\xffb":                       "is not UTF-8",
		"/" + strings.Repeat("a", 4096): "the limit is 4096",
	} {
		err := CheckAbsPath("cache dir", p)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckAbsPath(%q) = %v, want nil", p, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckAbsPath(%q) = %v, want an error saying %q", p, err, want)
		}
	}
}
