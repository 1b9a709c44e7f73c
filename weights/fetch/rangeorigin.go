package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/llmgw/llmgw/weights/catalog"
)

// An Origin is one remote file as a reader outside this package asks it for
// byte ranges: the lease holder of a fabric's swarm (agent/), which reads
// the fabric's one copy of a model's files range by range. Its requests are
// the Fetcher's own, so that a file read through the swarm meets the origin
// exactly as one the Fetcher downloads:
//
//   - an hf: file is asked of the Hub at HFEndpoint (hf_endpoint, else
//     $HF_ENDPOINT), a Hub model's file at resolve/COMMIT/PATH, never at a
//     branch; the Hub's redirect to its CDN is followed, and the token is
//     sent to the Hub's own scheme, host and port only, never across the
//     redirect (StripCredentials);
//   - network errors, 5xx and 429 are retried with the Fetcher's backoff,
//     a 429 or 503 after as long as its Retry-After says (up to two
//     minutes; longer is said as an error, not slept);
//   - a refusal is said in words: a gated or private repository names the
//     setting that gives the node its token (hf_token_file), and the Hub's
//     own code and message are kept;
//   - an answer of another commit than the model's (X-Repo-Commit: a
//     mirror serving another revision), or whose size or published sha256
//     is not the catalog's, is refused before a byte of it is used;
//   - a body is watched: no byte for IdleTimeout, or less than MinSpeed,
//     ends it with an error, as a download's connection.
type Origin struct {
	d *download
}

// Origin is the origin of source (hf: or http(s)) for range reads; want is
// what the catalog says of the file (its size above all: every range is
// checked against it). client, when set, makes the requests instead of the
// Fetcher's own (its redirect rule still added).
func (f *Fetcher) Origin(source string, want Want, client *http.Client) (*Origin, error) {
	rem, err := parseRemote(source, f.hfEndpoint())
	if err != nil {
		return nil, &Error{Source: source, Op: "parse", Err: err}
	}
	return f.origin(rem, want, client)
}

// HubOrigin is the origin of file of the Hub model h, at h's commit.
func (f *Fetcher) HubOrigin(h catalog.Hub, file catalog.HubFile, client *http.Client) (*Origin, error) {
	src := "hf:" + h.Repo + "@" + h.Commit + "/" + file.Path
	rem, err := hubRemote(src, f.hfEndpoint(), h.Repo, h.Commit, file.Path)
	if err != nil {
		return nil, &Error{Source: src, Op: "parse", Err: err}
	}
	return f.origin(rem, Want{SHA256: file.SHA256, GitBlob: file.Blob, Size: file.Size, Commit: h.Commit}, client)
}

func (f *Fetcher) origin(rem remote, want Want, client *http.Client) (*Origin, error) {
	d := &download{f: f, rem: rem, want: want, log: f.logger().WithField("source", catalog.RedactQuery(rem.source)), hc: client}
	if rem.hf {
		tok, err := f.hfToken()
		if err != nil {
			return nil, &Error{Source: rem.source, Op: "token", Err: err}
		}
		d.token = tok
	}
	return &Origin{d: d}, nil
}

// Source is the origin's source, as errors name it.
func (o *Origin) Source() string { return o.d.rem.source }

// Range asks the origin for bytes from..to (inclusive) of the file and
// returns a body of exactly those bytes. Errors are *Error; what asking
// again cannot cure (a refusal, another commit, another size, an origin
// that ignores ranges) is said so, and retries are already spent on the
// rest.
func (o *Origin) Range(ctx context.Context, from, to int64) (io.ReadCloser, error) {
	d := o.d
	fail := func(err error) (io.ReadCloser, error) {
		var fe *Error
		if errors.As(err, &fe) {
			return nil, err
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			// A redirect target is a signed CDN URL: keep its host only.
			err = fmt.Errorf("%s %s: %w", ue.Op, redactURL(ue.URL), ue.Err)
		}
		return nil, &Error{Source: d.rem.source, Op: "get", Err: err}
	}
	b, err := d.open(ctx, from, to, "")
	if err != nil {
		return fail(err)
	}
	resp := b.resp
	if d.rem.hf {
		if err := d.checkHub(resp); err != nil {
			b.Close()
			return nil, err
		}
	}
	n := to - from + 1
	switch resp.StatusCode {
	case http.StatusPartialContent:
		cr, err := parseContentRange(resp.Header.Get("Content-Range"))
		if err != nil || cr.start != from || cr.end != to {
			b.Close()
			return fail(fmt.Errorf("asked for bytes %d-%d, got Content-Range %q", from, to, resp.Header.Get("Content-Range")))
		}
		if err := d.checkAnnounced(cr.size); err != nil {
			b.Close()
			return nil, err
		}
	case http.StatusOK:
		if err := d.checkAnnounced(resp.ContentLength); err != nil {
			b.Close()
			return nil, err
		}
		if from != 0 {
			b.Close()
			return fail(fmt.Errorf("the origin answered a range request for bytes %d-%d with the whole file (%s); a swarm reads ranges, so it needs an origin that serves them", from, to, resp.Status))
		}
	}
	return &rangeBody{b: b, r: io.LimitReader(b, n)}, nil
}

// rangeBody is a watched body cut at the range's end.
type rangeBody struct {
	b *body
	r io.Reader
}

func (r *rangeBody) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *rangeBody) Close() error               { r.b.Close(); return nil }
