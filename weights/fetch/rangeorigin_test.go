package fetch

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights/catalog"
)

// rangeOf reads bytes from..to of file of hb through an Origin.
func rangeOf(t *testing.T, f *Fetcher, hb catalog.Hub, path string, from, to int64) ([]byte, error) {
	t.Helper()
	for _, file := range hb.Files {
		if file.Path != path {
			continue
		}
		o, err := f.HubOrigin(hb, file, nil)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		body, err := o.Range(ctx, from, to)
		if err != nil {
			return nil, err
		}
		defer body.Close()
		return io.ReadAll(body)
	}
	t.Fatalf("no file %s", path)
	return nil, nil
}

// TestOriginRangeOfHubFiles: a range of an LFS file comes through the Hub's
// redirect to its CDN, a range of a small file from the Hub itself, each
// exactly the bytes asked for, at the model's commit.
func TestOriginRangeOfHubFiles(t *testing.T) {
	x := newHubFixture(t)
	files := tinyRepo()
	x.h.Commit("org/tiny", "main", files)
	hb := x.model(t, "org/tiny")
	got, err := rangeOf(t, x.f, hb, "model-00001-of-00002.safetensors", 1000, 200<<10)
	if err != nil {
		t.Fatal(err)
	}
	if want := files["model-00001-of-00002.safetensors"][1000 : 200<<10+1]; !bytes.Equal(got, want) {
		t.Fatalf("LFS range: %d bytes, not the file's", len(got))
	}
	got, err = rangeOf(t, x.f, hb, "config.json", 3, 9)
	if err != nil || string(got) != string(files["config.json"][3:10]) {
		t.Fatalf("small file range: %q, %v", got, err)
	}
	for _, r := range x.h.Requests() {
		if strings.Contains(r, "/resolve/main/") {
			t.Errorf("asked at a branch, not the commit: %s", r)
		}
	}
}

// TestOriginRangeWaitsOutRetryAfter: a 429 with Retry-After is waited out
// as it says, then the range comes.
func TestOriginRangeWaitsOutRetryAfter(t *testing.T) {
	x := newHubFixture(t)
	files := tinyRepo()
	x.h.Commit("org/tiny", "main", files)
	hb := x.model(t, "org/tiny")
	x.h.Limit(1, 1)
	start := time.Now()
	got, err := rangeOf(t, x.f, hb, "model-00002-of-00002.safetensors", 0, 99)
	if err != nil || !bytes.Equal(got, files["model-00002-of-00002.safetensors"][:100]) {
		t.Fatalf("after a 429: %d bytes, %v", len(got), err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("asked again after %v; the Hub said Retry-After: 1", took)
	}
}

// TestOriginRangeGated: a gated repository without a token is refused in
// words that name the setting giving the node its token; with it, the
// range comes.
func TestOriginRangeGated(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	x.h.Gate("org/tiny", "hf_secret")
	_, err := rangeOf(t, x.f, hb, "config.json", 0, 3)
	if err == nil || !strings.Contains(err.Error(), "hf_token_file") || !strings.Contains(err.Error(), "GatedRepo") {
		t.Fatalf("gated, no token: %v; want the Hub's GatedRepo and a word of hf_token_file", err)
	}
	x.f.HFToken = "hf_secret"
	if _, err := rangeOf(t, x.f, hb, "model-00001-of-00002.safetensors", 0, 3); err != nil {
		t.Fatalf("gated, with the token: %v", err)
	}
}

// TestOriginRangeWrongSize: an origin whose file is not the catalog's size
// is refused before its bytes are used.
func TestOriginRangeWrongSize(t *testing.T) {
	x := newHubFixture(t)
	x.h.Commit("org/tiny", "main", tinyRepo())
	hb := x.model(t, "org/tiny")
	hb.Files[0].Size++
	_, err := rangeOf(t, x.f, hb, hb.Files[0].Path, 0, 3)
	if err == nil || !strings.Contains(err.Error(), "size mismatch") {
		t.Fatalf("a file one byte shorter than the catalog says: %v", err)
	}
}
