package demo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGenerateIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	w := Weight{Model: "m", File: "m.gguf", Size: 1<<20 + 17, Seed: 42}
	a, err := Generate(filepath.Join(dir, "a"), w)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(filepath.Join(dir, "b"), w)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("same seed, different digests %s %s", a, b)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "a"))
	sum := sha256.Sum256(data)
	if int64(len(data)) != w.Size || hex.EncodeToString(sum[:]) != a {
		t.Errorf("file: %d bytes, digest %x; want %d bytes, digest %s", len(data), sum, w.Size, a)
	}
	w.Seed = 43
	if c, _ := Generate(filepath.Join(dir, "c"), w); c == a {
		t.Error("another seed gave the same bytes")
	}
}

func TestOriginRangesAndPace(t *testing.T) {
	dir := t.TempDir()
	data := []byte(strings.Repeat("0123456789", 100_000)) // 1 MB
	if err := os.WriteFile(filepath.Join(dir, "w.gguf"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	const rate = 4 << 20
	o, err := NewOrigin(dir, rate)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if !strings.HasPrefix(o.URL("w.gguf"), "http://127.0.0.1:") {
		t.Fatalf("origin not on loopback: %s", o.URL("w.gguf"))
	}

	start := time.Now()
	resp, err := http.Get(o.URL("w.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil || string(got) != string(data) {
		t.Fatalf("GET: %d bytes, err %v", len(got), err)
	}
	// 1 MB at 4 MiB/s is a quarter of a second; the first chunk goes at once.
	if min := time.Duration(float64(len(data)-chunk) / rate * float64(time.Second)); took < min*9/10 {
		t.Errorf("1 MB took %s at %d B/s; want at least %s", took, rate, min)
	}

	req, _ := http.NewRequest(http.MethodGet, o.URL("w.gguf"), nil)
	req.Header.Set("Range", "bytes=10-19")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || string(part) != "0123456789" {
		t.Errorf("range: %d %q", resp.StatusCode, part)
	}

	for _, p := range []string{"missing.gguf", "../w.gguf", ".hidden", ""} {
		resp, err := http.Get(o.URL(p))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /%s: %d, want 404", p, resp.StatusCode)
		}
	}
}

func TestLimiterEndsWithContext(t *testing.T) {
	l := &limiter{rate: 1}
	l.wait(context.Background(), 1) // the first byte goes at once
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// The next slot is a second away: the wait must end with ctx, not
	// hold a transfer (and the origin's shutdown) for it.
	start := time.Now()
	if err := l.wait(ctx, 1000); err != context.DeadlineExceeded {
		t.Errorf("wait = %v, want %v", err, context.DeadlineExceeded)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("wait took %s after its context ended", took)
	}
}

func TestRealign(t *testing.T) {
	in := "MODEL mistral  source http://x  size 1 MB\n\n" +
		"NODE  PATH                                       FREE\n" +
		"n1    $DEMO/n1/cache/abc-m.gguf                  82 GB\n" +
		"n2    -                                          82 GB\n" +
		"$DEMO/filer: fuse (shared), 1 weights"
	want := "MODEL mistral  source http://x  size 1 MB\n\n" +
		"NODE  PATH                       FREE\n" +
		"n1    $DEMO/n1/cache/abc-m.gguf  82 GB\n" +
		"n2    -                          82 GB\n" +
		"$DEMO/filer: fuse (shared), 1 weights"
	if got := Realign(in); got != want {
		t.Errorf("Realign:\n%s\nwant:\n%s", got, want)
	}
}
