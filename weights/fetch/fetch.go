// Package fetch makes a model's file present on a node.
//
// The simple arrangement, and the default: every node has its own copy. A
// source that is already a local path is used as it stands; a bare model id
// is left to the engine; one that names a remote file (hf: or http(s)) is
// fetched into a cache directory once, under catalog.CachePathFor's name,
// and reused. The fetch resumes without splicing versions, is verified
// before it is renamed into place, and runs once per file per node, however
// many goroutines (Fetcher.Ensure) and processes (a node-local lock) ask.
// Nothing here manages storage, decides a retention policy, or mounts
// anything.
//
// Of llmgw it imports only weights/catalog, whose names for the cache and
// for a fetch under way it shares with the scanner and gc.
package fetch

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/llmgw/llmgw/weights/catalog"
)

// Default fetch settings.
const (
	// DefaultConnections is how many connections a large file is fetched
	// with when the origin serves ranges. Eight is what aria2c users settle
	// on: origins and CDNs commonly cap each connection, and eight capped
	// flows fill a node's link without looking like an attack.
	DefaultConnections = 8
	// DefaultLockDir is the node-local directory for cross-process fetch
	// locks. /run is a tmpfs on every systemd machine, so a lock there is
	// local to the node by construction.
	DefaultLockDir = "/run/llmgw/locks"
	// DefaultIdleTimeout is how long a connection may deliver nothing before
	// it is dropped and retried.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultRetries is how many times one request is retried after a
	// network error, a 5xx or a 429 before the fetch gives up.
	DefaultRetries = 5
	// DefaultRetryWait is the first pause before a retry; it doubles up to
	// maxRetryWait.
	DefaultRetryWait = time.Second
	// DefaultParallelMin is the smallest file fetched with more than one
	// connection. Below it the extra requests cost more than they save.
	DefaultParallelMin = 64 << 20
	// DefaultMinSpeed is the slowest a connection may be, over an
	// IdleTimeout window, before it is dropped: 64 KiB/s. A connection that
	// slow on a cluster's link is a stuck CDN node or a trickling proxy, not
	// a slow network, and a fresh connection usually does better; it is low
	// enough that a genuinely slow origin is still fetched.
	DefaultMinSpeed = 64 << 10
	// DefaultProgressInterval is how often OnProgress is called.
	DefaultProgressInterval = time.Second
)

// maxRetryWait caps the backoff between retries (a Retry-After the server
// sends is honoured even when longer, up to maxRetryAfter).
const maxRetryWait = 30 * time.Second

// maxRetryAfter is the longest Retry-After a fetch waits out; beyond it the
// fetch fails at once (see download.sleep). Five minutes is about as long
// as a job's Prolog may reasonably wait for one origin.
const maxRetryAfter = 5 * time.Minute

// maxRestarts bounds how often a fetch throws its bytes away and starts over
// because the remote changed under it. A remote that changes on every
// attempt cannot be fetched consistently, and saying so beats looping.
const maxRestarts = 3

// Progress reports how a fetch is going, for anything that wants to say so.
// A missing model is the difference between a replica that is slow to start
// and one that is stuck; without this the two look the same from outside.
type Progress struct {
	Source string
	Done   int64 // bytes on disk, including those kept from earlier attempts
	Total  int64 // -1 when the origin does not say
}

// Percent is how far along, or -1 when the total is unknown.
func (p Progress) Percent() int {
	if p.Total <= 0 {
		return -1
	}
	return int(p.Done * 100 / p.Total)
}

// Want is what the caller knows the file must be. Zero values are not
// checked; the size the origin announces is always checked.
type Want struct {
	// SHA256 is the expected digest, hex (any case). The catalog passes it;
	// for hf: sources the hub's published digest is checked as well.
	SHA256 string
	// Size is the expected length in bytes.
	Size int64
	// GitBlob is the expected git blob id (hex sha1 of "blob SIZE\0" and
	// the bytes): how the Hub names a small file of a repository, which
	// has no published sha256.
	GitBlob string
	// Commit is the commit the Hub must say it served (X-Repo-Commit): a
	// file of a Hub model is fetched at its commit, and a mirror that
	// answers with another revision's bytes is refused.
	Commit string
}

// ErrNotLocal reports that a path source names nothing on this node. A path
// is checked, never fetched, so there is nowhere to get it from. Ensure
// returns it wrapped; test for it with errors.Is.
var ErrNotLocal = errors.New("the weights are not on this node and the source is a path, which is never fetched")

// ErrNoSpace reports that the cache's filesystem cannot hold a fetch: found
// before it started (the announced size against the free space less what
// the fetches in flight on the node have claimed), by ENOSPC during it, or,
// for an origin that gives no length, by reaching cache_reserve. Ensure
// returns it wrapped, with the sizes and the mount; test for it with
// errors.Is. A fetch refused up front keeps an earlier attempt's partial
// file; one that ran out of space during the fetch removes its own, to give
// the space back.
var ErrNoSpace = errors.New("not enough disk space")

// Error records a failed Ensure and the step that failed. Op is one of
// "parse", "check", "mkdir", "lock", "token", "get", "write", "verify" or
// "rename".
type Error struct {
	Source string // as given to Ensure
	Op     string
	Err    error
}

func (e *Error) Error() string {
	src := e.Source
	if src == "" {
		src = `""`
	}
	return e.Op + " " + src + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Fetcher makes sources local. The zero value is usable for path and model-id
// sources; remote sources need CacheDir. A Fetcher must not be copied after
// first use, and its fields must not change while Ensure runs.
type Fetcher struct {
	// CacheDir is where remote sources land, named by catalog.CachePathFor. Required
	// for remote sources.
	CacheDir string

	// LockDir holds one lock file per cache file, so that only one process
	// on the node fetches it (default: DefaultLockDir if it can be created,
	// else os.TempDir()/llmgw-locks-<uid>; see defaultLockDir). It must be on
	// a node-local filesystem: on Lustre, GPFS and some NFS setups flock
	// succeeds for every caller, which is no lock at all.
	LockDir string

	// Connections is how many connections a large file is fetched with when
	// the origin serves ranges (default DefaultConnections; 1 fetches with a
	// single stream).
	Connections int

	// Client makes the requests (default: an HTTP/1.1-only client, see
	// newClient). HTTP/1.1 matters: Go's HTTP/2 would multiplex every range
	// onto one TCP flow, and a per-connection cap would then cap the lot.
	Client *http.Client

	// OnProgress is called from one goroutine at most every
	// ProgressInterval while a fetch runs, and once at its end. May be nil.
	OnProgress func(Progress)

	// ProgressInterval throttles OnProgress (default DefaultProgressInterval).
	ProgressInterval time.Duration

	// Log receives one line per fetch started, retried, restarted or
	// finished. May be nil. Tokens are never logged.
	Log logrus.FieldLogger

	// IdleTimeout drops a connection that delivered no bytes for this long
	// and retries it (default DefaultIdleTimeout). It also bounds the wait
	// for response headers. The overall deadline is the caller's context.
	IdleTimeout time.Duration

	// Retries is how many times one request is retried after a network
	// error, a 5xx or a 429 (default DefaultRetries; negative: never).
	Retries int

	// RetryWait is the first backoff (default DefaultRetryWait), doubling
	// each retry up to 30s. A Retry-After header takes precedence.
	RetryWait time.Duration

	// ParallelMin is the smallest file fetched over several connections
	// (default DefaultParallelMin).
	ParallelMin int64

	// ChunkSize is the size of the ranges a parallel fetch hands its
	// connections (default: the file split into four per connection, between
	// 16 MiB and 1 GiB). A killed fetch redoes at most one chunk per
	// connection.
	ChunkSize int64

	// HFEndpoint is the hub hf: sources resolve against (default
	// $HF_ENDPOINT, else https://huggingface.co), so mirrors work.
	HFEndpoint string

	// HFToken is sent to the hub for gated and private models (default
	// $HF_TOKEN, else $HF_TOKEN_PATH, else HFTokenFile, else the token file
	// huggingface-cli login writes; see hfToken). It is sent only to the
	// hub's scheme, host and port, never logged.
	HFToken string

	// HFTokenFile is a file holding the hub token (agent.toml's
	// hf_token_file), read when neither $HF_TOKEN nor $HF_TOKEN_PATH is
	// set: slurmd runs a Prolog with no $HOME, where huggingface-cli's
	// file cannot be found.
	HFTokenFile string

	// CacheReserve is the free space, in bytes, a fetch from an origin that
	// gives no length leaves on the cache's filesystem: it stops there
	// rather than grow into the last blocks (default: 5% of the
	// filesystem, at most 10 GB; negative: none). Fetches of a known size
	// are checked against the space itself, before their first byte.
	CacheReserve int64

	// MinSpeed drops a connection that delivers fewer bytes a second than
	// this over an IdleTimeout window, like aria2's --lowest-speed-limit
	// (default DefaultMinSpeed; negative: never). A parallel fetch hands
	// the dropped connection's range to the next free connection; a single
	// stream reconnects and resumes.
	MinSpeed int64

	// MakeRoom, when set, is asked to free need bytes on the filesystem
	// holding dir before a fetch that does not fit is refused (the agent
	// evicts, weights/evict); it returns what it freed and, when that is
	// short, what holds the rest and why, for the refusal to say.
	MakeRoom func(ctx context.Context, dir string, need int64) (freed int64, held string)

	// PrefetchRoom, when set, answers for a fetch made ahead of any job
	// (Ahead) whether need more bytes may be claimed on the filesystem
	// holding dir without evicting anything (the agent's cache budget at
	// prefetch priority); why says why not. Such a fetch never asks
	// MakeRoom, set or not.
	PrefetchRoom func(ctx context.Context, dir string, need int64) (ok bool, why string)

	mu            sync.Mutex
	sizes         map[string]int64 // sources' sizes probeSize learnt
	inflight      map[string]*call
	defaultClient *http.Client
}

// call is one fetch shared by every Ensure waiting for the same file.
type call struct {
	done    chan struct{}
	cancel  context.CancelFunc
	waiters int

	path string
	sum  string // hex sha256 of the file, when the fetch computed it
	err  error
}

// Ensure returns a local path for source, fetching it first if it is remote
// and not yet in the cache.
//
// A plain path ("/", "./", "../") is never fetched, only checked: a path is
// what an operator writes when the file is already there — local disk, a
// Lustre mount, an image exported over the fabric — and a downloader that
// second-guessed it would copy a hundred gigabytes that were already present.
// A missing path is an error wrapping ErrNotLocal. A bare model id
// ("Qwen/Qwen2.5-7B-Instruct") is returned unchanged: vLLM and SGLang resolve
// those themselves. "hf:org/repo[@revision]/file" and "http(s)://" sources
// are fetched into CacheDir under catalog.CachePathFor's name.
//
// Concurrent calls for one source share a single fetch. The fetch runs on its
// own context, canceled only when every caller waiting on it has given up:
// one impatient caller gets its own ctx.Err() and does not fail the others,
// and nobody waiting means nobody should pay for the download. The bytes a
// canceled fetch got are kept for the next attempt to resume. Across
// processes on one node a lock in LockDir does the same job: the second
// process waits, then finds the file.
//
// The file is written to "<path>.part" and renamed only once its size, and
// its sha256 when one is known (want.SHA256, or the hub's for hf: sources),
// have been checked; no partial or unverified file is ever visible under the
// real name. Errors are *Error.
func (f *Fetcher) Ensure(ctx context.Context, source string, want Want) (string, error) {
	switch catalog.KindOf(source) {
	case catalog.KindInvalid:
		return "", &Error{Source: source, Op: "parse", Err: errors.New("empty source; give a path, a model id, hf:org/repo/file or an http(s) URL")}
	case catalog.KindModelID:
		if err := checkModelID(source); err != nil {
			return "", &Error{Source: source, Op: "parse", Err: err}
		}
		// Not a file and never meant to be one: the engine resolves it, and
		// doing it for it would be a duplicate downloader and a change in
		// documented behaviour.
		return source, nil
	case catalog.KindPath:
		if _, err := os.Stat(source); err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				return "", &Error{Source: source, Op: "check", Err: fmt.Errorf("%w (%v)", ErrNotLocal, err)}
			}
			return "", &Error{Source: source, Op: "check", Err: err}
		}
		return source, nil
	}
	return f.ensureRemote(ctx, source, "", want)
}

// ensureRemote is Ensure of a remote source into the cache, or, when set
// names a set directory (catalog.SetName), into that directory under the
// source's own file name (see EnsureIn).
func (f *Fetcher) ensureRemote(ctx context.Context, source, set string, want Want) (string, error) {
	rem, err := parseRemote(source, f.hfEndpoint())
	if err != nil {
		return "", &Error{Source: source, Op: "parse", Err: err}
	}
	if f.CacheDir == "" {
		return "", &Error{Source: source, Op: "parse", Err: errors.New("no cache directory configured, so a remote source cannot be fetched; set --cache-dir")}
	}
	target := catalog.CachePathFor(f.CacheDir, source)
	var claim func(context.Context) error
	if set != "" {
		target = catalog.SetFilePath(filepath.Join(f.CacheDir, set), source)
		// The whole set's room before this file's first byte.
		claim = func(ctx context.Context) error { return f.claimSetOf(ctx, set, source) }
	}
	return f.ensureAt(ctx, rem, target, want, claim)
}

// ensureAt is Ensure of the remote rem into target: one fetch per target
// for the process (and, through the lock, for the node), verified
// against want before it gets target's name. claim, when set, claims
// room for more than this one file (a set's whole) once the file is
// found missing and before its first byte.
func (f *Fetcher) ensureAt(ctx context.Context, rem remote, target string, want Want, claim func(context.Context) error) (string, error) {
	source := rem.source
	if want.SHA256 != "" {
		if !catalog.ValidSHA256(want.SHA256) {
			return "", &Error{Source: source, Op: "parse", Err: fmt.Errorf("expected sha256 %q is not 64 hex digits", want.SHA256)}
		}
		want.SHA256 = strings.ToLower(want.SHA256)
	}
	if want.GitBlob != "" && !catalog.ValidCommit(want.GitBlob) {
		return "", &Error{Source: source, Op: "parse", Err: fmt.Errorf("expected git blob id %q is not 40 lowercase hex digits", want.GitBlob)}
	}
	// Only the cheap check here: a file that must be hashed first is hashed
	// by the shared call below, once however many callers ask at the same
	// time.
	if p, ok, _, err := present(ctx, target, want, false); err != nil {
		return "", &Error{Source: source, Op: "check", Err: err}
	} else if ok {
		return p, nil
	}

	if claim != nil {
		if err := claim(ctx); err != nil {
			var fe *Error
			if errors.As(err, &fe) {
				return "", err
			}
			return "", &Error{Source: source, Op: "get", Err: err}
		}
	}

	f.mu.Lock()
	if f.inflight == nil {
		f.inflight = make(map[string]*call)
	}
	c, ok := f.inflight[target]
	if !ok {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		c = &call{done: make(chan struct{}), cancel: cancel}
		f.inflight[target] = c
		go func() {
			c.path, c.sum, c.err = f.fetch(fctx, rem, target, want)
			f.mu.Lock()
			if f.inflight[target] == c {
				delete(f.inflight, target)
			}
			f.mu.Unlock()
			close(c.done)
		}()
	}
	c.waiters++
	f.mu.Unlock()

	select {
	case <-c.done:
		f.leave(target, c)
		if c.err != nil {
			return "", c.err
		}
		// The shared fetch verified what its first caller wanted; a later
		// caller with other expectations checks its own.
		if err := checkWant(ctx, c.path, c.sum, want); err != nil {
			return "", &Error{Source: source, Op: "verify", Err: err}
		}
		return c.path, nil
	case <-ctx.Done():
		f.leave(target, c)
		return "", &Error{Source: source, Op: "get", Err: ctx.Err()}
	}
}

// leave drops one waiter; the last one out cancels the fetch and forgets it,
// so the next caller starts afresh (resuming from the .part) instead of
// joining a canceled fetch.
func (f *Fetcher) leave(target string, c *call) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c.waiters--
	if c.waiters == 0 {
		c.cancel()
		if f.inflight[target] == c {
			delete(f.inflight, target)
		}
	}
}

// present reports whether target is already in the cache as the caller
// wants it. A file under the real name was verified against what its fetch
// knew before it was renamed there, so the size is checked again cheaply.
// A digest the caller expects is checked too, against the sha256 recorded
// on the file when it was fetched (trusted only while the file's size and
// mtime are those that were hashed), or, where none is, by hashing the file
// once and recording the result — only when hash is set; without it a file
// that would need hashing is reported absent, for the caller that hashes. A
// size or digest that differs means the origin has published a new file,
// which is fetched (and renamed over the old one only once it verifies).
// sum is the file's digest when it was known or computed.
func present(ctx context.Context, target string, want Want, hash bool) (path string, ok bool, sum string, err error) {
	st, err := os.Stat(target)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return "", false, "", nil // and MkdirAll will say what is wrong with the directory
	case err != nil:
		return "", false, "", err
	case !st.Mode().IsRegular():
		return "", false, "", fmt.Errorf("%s is in the cache but is not a regular file; remove it", target)
	case want.Size > 0 && st.Size() != want.Size:
		return "", false, "", nil
	}
	if want.SHA256 == "" {
		return target, true, "", nil
	}
	sum = recordedSum(target)
	if sum == "" {
		if !hash {
			return "", false, "", nil
		}
		if sum, err = fileSHA256(ctx, target); err != nil {
			return "", false, "", err
		}
	}
	return target, sum == want.SHA256, sum, nil
}

// checkWant checks a fetched file against one caller's expectations. sum is
// the digest the fetch computed, or "" when it computed none.
func checkWant(ctx context.Context, path, sum string, want Want) error {
	if want.Size > 0 {
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		if st.Size() != want.Size {
			return fmt.Errorf("%s has %d bytes, expected %d", path, st.Size(), want.Size)
		}
	}
	if want.SHA256 == "" {
		return nil
	}
	if sum == "" {
		var err error
		if sum, err = fileSHA256(ctx, path); err != nil {
			return err
		}
	}
	if sum != want.SHA256 {
		return fmt.Errorf("%s has sha256 %s, expected %s", path, sum, want.SHA256)
	}
	return nil
}

// fetch makes target present: under the node lock, unless another process
// made it present while this one waited.
func (f *Fetcher) fetch(ctx context.Context, rem remote, target string, want Want) (path, sum string, err error) {
	fail := func(op string, err error) (string, string, error) {
		return "", "", &Error{Source: rem.source, Op: op, Err: err}
	}
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("mkdir", fmt.Errorf("cache directory cannot be created: %w", err))
	}
	unlock, err := f.lock(ctx, target)
	if err != nil {
		return fail("lock", err)
	}
	defer unlock()
	part := target + catalog.PartSuffix
	for {
		// Another process may have finished it while this one waited.
		if p, ok, sum, err := present(ctx, target, want, true); err != nil {
			return fail("check", err)
		} else if ok {
			return p, sum, nil
		}
		fh, err := f.lockPart(ctx, part)
		if errors.Is(err, errPartMoved) {
			continue
		}
		if err != nil {
			return fail("lock", err)
		}
		d := &download{f: f, rem: rem, target: target, want: want, fh: fh, log: f.logger().WithField("source", rem.source)}
		sum, err = d.run(ctx)
		if err != nil {
			d.dropEmptyPart()
		}
		fh.Close()
		if err != nil {
			return "", "", err
		}
		return target, sum, nil
	}
}

func (f *Fetcher) logger() logrus.FieldLogger {
	if f.Log != nil {
		return f.Log
	}
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// positiveOr is v, or def when v is zero or negative: the Fetcher's numeric
// fields all document zero as "the default".
func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

func (f *Fetcher) connections() int { return positiveOr(f.Connections, DefaultConnections) }

func (f *Fetcher) idleTimeout() time.Duration { return positiveOr(f.IdleTimeout, DefaultIdleTimeout) }

func (f *Fetcher) retries() int {
	switch {
	case f.Retries < 0:
		return 0
	case f.Retries == 0:
		return DefaultRetries
	}
	return f.Retries
}

func (f *Fetcher) minSpeed() int64 {
	if f.MinSpeed < 0 {
		return 0
	}
	return positiveOr(f.MinSpeed, DefaultMinSpeed)
}

func (f *Fetcher) retryWait() time.Duration { return positiveOr(f.RetryWait, DefaultRetryWait) }

func (f *Fetcher) parallelMin() int64 { return positiveOr(f.ParallelMin, DefaultParallelMin) }

func (f *Fetcher) progressInterval() time.Duration {
	return positiveOr(f.ProgressInterval, DefaultProgressInterval)
}

// client returns the configured client, or builds the default once.
func (f *Fetcher) client() *http.Client {
	if f.Client != nil {
		return f.Client
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.defaultClient == nil {
		f.defaultClient = newClient(f.connections(), f.idleTimeout())
	}
	return f.defaultClient
}

// newClient is an HTTP/1.1-only client: ForceAttemptHTTP2 off and an empty
// TLSNextProto, so each range gets its own TCP connection (HTTP/2 would put
// them all on one flow, under one per-connection cap). It has no overall
// timeout — a 100 GB file legitimately takes an hour; the caller's context is
// the deadline and IdleTimeout catches a stalled connection.
func newClient(conns int, idle time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     false,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: idle,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		// Ranges and sizes are of the stored bytes; a transparently
		// decompressed body would make both wrong.
		DisableCompression: true,
		ReadBufferSize:     256 << 10,
	}}
}

// fileSHA256 hashes a file through one descriptor, stopping early when ctx
// ends, and records the digest on it when the file did not change while it
// was read.
func fileSHA256(ctx context.Context, path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	before, err := fh.Stat()
	if err != nil {
		return "", err
	}
	sum, err := hashFD(ctx, fh)
	if err != nil {
		return "", err
	}
	if after, err := fh.Stat(); err == nil && after.Size() == before.Size() && after.ModTime().Equal(before.ModTime()) {
		recordSum(fh, sum)
	}
	return sum, nil
}

// hashes counts whole-file hashes, so tests can see that a file is hashed
// once however many callers want it checked.
var hashes atomic.Int64

// gitBlobFD is the git blob id of the file open as fh, size bytes long:
// the sha1 of "blob SIZE\0" and the bytes, read through the descriptor.
func gitBlobFD(ctx context.Context, fh *os.File, size int64) (string, error) {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	if err := readAllAt(ctx, fh, h); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readAllAt writes the file open as fh, from its start, to w.
func readAllAt(ctx context.Context, fh *os.File, w io.Writer) error {
	buf := make([]byte, 1<<20)
	var off int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := fh.ReadAt(buf, off)
		w.Write(buf[:n])
		off += int64(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// hashFD hashes the file open as fh from its start, stopping early when ctx
// ends. Through the descriptor, not the name: what is hashed is then the
// inode that is tagged and renamed, whatever the name points at meanwhile.
func hashFD(ctx context.Context, fh *os.File) (string, error) {
	hashes.Add(1)
	h := sha256.New()
	if err := readAllAt(ctx, fh, h); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
