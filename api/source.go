package api

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/llmgw/llmgw/weights/catalog"
)

// The source rules live here, not in weights/catalog with the other name
// rules, because they parse URLs, and net/url is more than the hook binary,
// which links catalog, may carry (cmd/llmgw-hook/deps_test.go). Only the
// coordinator and the command line apply them.

// CheckSource says why source cannot be a catalog source, or nil. It is
// applied where an admin adds a model, so a mistake or a trick is refused
// with its reason before any node acts on it:
//   - a path must be absolute: nodes resolve nothing relative to anything;
//   - hf:org/repo[@rev]/file: org and repo are hub names ([A-Za-z0-9._-],
//     never "." or ".."), and no segment of the revision or file is "." or
//     "..": the fetcher joins them onto HF_ENDPOINT, and "hf:../../x.gguf"
//     would leave the hub's base path on the host that is sent the hub token;
//   - http:// or https:// with a host, and without user:password@: a
//     catalog is read by every node and, through the open read of
//     GET /v1/models, by anyone, so it must hold no credentials;
//   - a bare model id, org/name[@rev], which the engine resolves.
//
// Anything else, file://, ftp://, s3://, is refused rather than handed to
// an engine as a model id.
func CheckSource(source string) error {
	switch {
	case source == "":
		return errors.New("source is empty; give an absolute path, hf:org/repo/file, an http(s) URL, or a model id (org/name)")
	case len(source) > catalog.MaxPath:
		return fmt.Errorf("source is %d bytes; the limit is %d", len(source), catalog.MaxPath)
	case !utf8.ValidString(source):
		return errors.New("source is not UTF-8 text")
	}
	for _, r := range source {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || unicode.IsSpace(r) {
			return fmt.Errorf("source %q contains white space or a control character", source)
		}
	}
	switch {
	case strings.HasPrefix(source, "/"):
		return nil
	case catalog.KindOf(source) == catalog.KindPath:
		return fmt.Errorf("source %q is a relative path; nodes see absolute paths, so give one", source)
	case strings.HasPrefix(source, "hf:"):
		return checkHF(source)
	case strings.HasPrefix(source, "http://"), strings.HasPrefix(source, "https://"):
		return checkURL(source)
	}
	return checkModelID(source)
}

func checkHF(source string) error {
	parts := strings.Split(strings.TrimPrefix(source, "hf:"), "/")
	if len(parts) < 3 {
		return fmt.Errorf("source %q names no file; write hf:org/repo/file or hf:org/repo@revision/file", source)
	}
	org, repo, file := parts[0], parts[1], parts[2:]
	repo, rev, hasRev := strings.Cut(repo, "@")
	for _, n := range []struct{ what, v string }{{"organisation", org}, {"repository", repo}} {
		if !isHubName(n.v) {
			return fmt.Errorf("source %q: the %s %q is not a hub name (letters, digits, '.', '_', '-'; not '.' or '..')", source, n.what, n.v)
		}
	}
	if hasRev {
		if err := checkSegments("revision", rev); err != nil {
			return fmt.Errorf("source %q: %w", source, err)
		}
	}
	if err := checkSegments("file path", strings.Join(file, "/")); err != nil {
		return fmt.Errorf("source %q: %w", source, err)
	}
	return nil
}

// checkSegments refuses an empty path, an empty segment, and "." and ".."
// segments, which a URL built from the path would resolve upwards.
func checkSegments(what, p string) error {
	if p == "" {
		return fmt.Errorf("the %s is empty", what)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("the %s %q has an empty, '.' or '..' segment", what, p)
		}
	}
	return nil
}

func isHubName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 96 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func checkURL(source string) error {
	u, err := url.Parse(source)
	switch {
	case err != nil:
		return fmt.Errorf("source %q is not a URL: %v", source, err)
	case u.User != nil:
		return fmt.Errorf("source %q carries a user name or password; the catalog is readable by every node and user, so give the URL without user:password@ and the credentials to the nodes' fetcher instead", RedactSource(source))
	case u.Hostname() == "":
		return fmt.Errorf("source %q has no host", source)
	case u.Opaque != "":
		return fmt.Errorf("source %q is not a hierarchical http(s) URL", source)
	case u.Path == "" || strings.HasSuffix(u.Path, "/"):
		return fmt.Errorf("source %q names a directory, not a file; give the URL of the weights file itself", RedactSource(source))
	}
	return nil
}

func checkModelID(source string) error {
	if i := strings.Index(source, ":"); i >= 0 {
		return fmt.Errorf("source %q: scheme %q is not one llmgw takes; give an absolute path, hf:org/repo/file, an http:// or https:// URL, or a model id (org/name)", source, source[:i])
	}
	id, rev, hasRev := strings.Cut(source, "@")
	parts := strings.Split(id, "/")
	if len(parts) > 2 {
		return fmt.Errorf("source %q is not a model id (org/name); a relative path must be given absolute", source)
	}
	for _, p := range parts {
		if !isHubName(p) {
			return fmt.Errorf("source %q: %q is not a hub name (letters, digits, '.', '_', '-'; not '.' or '..')", source, p)
		}
	}
	if hasRev {
		if err := checkSegments("revision", rev); err != nil {
			return fmt.Errorf("source %q: %w", source, err)
		}
	}
	return nil
}

// RedactSource returns source as someone who may not fetch it sees it: an
// http(s) URL without user:password@ and with its query string replaced by
// catalog.RedactQuery's digest. A query string is where signed URLs (S3,
// GCS, Azure SAS) carry their signature, and whoever reads it can fetch the
// object until it expires; the catalog, status and placement are served to
// anyone who can reach the coordinator, so only a caller trusted to fetch
// (an agent or an admin) is sent the whole. Other sources are returned as
// they are.
func RedactSource(source string) string {
	if !strings.HasPrefix(source, "http://") && !strings.HasPrefix(source, "https://") {
		return source
	}
	u, err := url.Parse(source)
	if err != nil {
		// Not a URL anything would fetch, and where its parts end is
		// unknown: show only its scheme.
		scheme, _, _ := strings.Cut(source, "://")
		return scheme + "://REDACTED"
	}
	if u.User != nil {
		u.User = nil
		source = u.String()
	}
	return catalog.RedactQuery(source)
}
