// Package store is the coordinator's sqlite database: the model catalog,
// and what every node last reported (its weights, one JSON array per node,
// and its fetches).
//
// Only the catalog has to survive anything. The rest is soft: each agent
// reports its whole state every interval, so after a restart, or after a
// crash that lost the last few reports, presence is whole again within one
// interval. The store therefore optimises for a fast stream of small
// replacing writes, not for keeping history.
//
// This is the only package that imports the sqlite driver; it persists api
// types and decides nothing beyond which catalog entry a reported path is.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3" // the driver; cgo
)

// ErrNotFound reports that a named catalog entry does not exist. Test for it
// with errors.Is.
var ErrNotFound = errors.New("not found")

// ErrConflict reports a catalog change that collides with another entry
// (two names for one source). Test for it with errors.Is.
var ErrConflict = errors.New("conflict")

//go:embed migrations/*.sql
var migrationFS embed.FS

// Checkpoints (copying committed WAL frames into the database file, with an
// fsync of each) run in a goroutine of their own on their own connection,
// at most every checkpointPause while there are writes. SQLite's default
// runs them inside the commit that crosses 1,000 WAL pages, on the one
// writer that every report waits for: during a burst of first reports the
// writer then spent its time copying pages and waiting for the disk while
// the handlers queued up behind it.
//
// The writer keeps an automatic checkpoint at walBackstopPages, far above
// what the background one lets accumulate, as a bound on the WAL: under
// continuous writes a background checkpoint never sees the WAL fully copied
// at a moment no commit follows, so the WAL is never restarted from its
// beginning; the writer's own checkpoint, run between its commits, is.
const (
	checkpointPause  = 200 * time.Millisecond
	walBackstopPages = 16384 // 64 MiB of 4 KiB pages
	writerDriver     = "sqlite3-llmgw-writer"
)

func init() {
	sql.Register(writerDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(fmt.Sprintf("PRAGMA wal_autocheckpoint = %d", walBackstopPages), nil)
		return err
	}})
}

// DB is the coordinator database. Its methods are safe for concurrent use.
//
// Writes go through one connection and are serialised by mu as well, so
// that the in-memory catalog matcher and per-node report order (both used
// while writing) change in step with the rows they describe. Reads use a
// separate pool and, thanks to WAL, never wait for a writer.
type DB struct {
	// ReplaceAfter lets a report that is older, by (Started, Seq), than the
	// stored one through anyway when the stored one was received more than
	// ReplaceAfter ago. Zero never does. It exists for an agent whose clock
	// was set back: without it, its new process would be ignored forever
	// instead of until its node goes stale. Set it before the first Ingest.
	ReplaceAfter time.Duration

	path string
	dsn  string
	// cur holds the connections in use; frozen swaps them for closed ones
	// while the files cannot be written (see freeze.go).
	cur       atomic.Pointer[conns]
	frozen    atomic.Pointer[string] // why, while frozen
	abandoned []*conns               // set aside by freeze; under mu

	wrote       chan struct{} // a write committed; capacity 1
	stop        chan struct{}
	stopped     chan struct{}
	watched     chan struct{} // closed when watch returns
	stopOnce    sync.Once
	checkpoints atomic.Int64 // background checkpoints run, for tests

	mu    sync.Mutex
	match *matcher
	meta  map[string]nodeMeta
	buf   []byte // ingest encodes presence arrays here, under mu
}

// Open opens the coordinator database at path, creating it if needed, and
// applies pending migrations (embedded from migrations/*.sql, in name order,
// each in its own transaction so a failed one leaves no half-applied schema;
// PRAGMA user_version counts the applied ones). The connections' settings
// are openConns'.
func Open(ctx context.Context, path string) (*DB, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("open database %q: want a file path", path)
	}
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath()
	db := &DB{path: path, dsn: dsn, meta: map[string]nodeMeta{},
		wrote: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}), watched: make(chan struct{})}
	cs, err := openConns(dsn)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	db.cur.Store(cs)
	if err := db.init(ctx); err != nil {
		close(db.stopped)
		close(db.watched)
		db.Close()
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	go db.checkpointer()
	go db.watch()
	return db, nil
}

// conns are the connections the store uses: one writer, a pool of
// readers, the checkpointer's own.
type conns struct {
	w, r, c *sql.DB
	stmts   stmts
}

func (db *DB) cw() *sql.DB { return db.cur.Load().w }
func (db *DB) cr() *sql.DB { return db.cur.Load().r }
func (db *DB) cc() *sql.DB { return db.cur.Load().c }
func (db *DB) st() *stmts  { return &db.cur.Load().stmts }
func (cs *conns) close() error {
	cs.stmts.close()
	return errors.Join(cs.c.Close(), cs.r.Close(), cs.w.Close())
}

// openConns opens the connections to the database at dsn.
//
// WAL lets status reads run while reports are written. busy_timeout makes a
// connection wait for the lock instead of failing with SQLITE_BUSY.
// synchronous=NORMAL in WAL mode syncs at checkpoints, not at every commit:
// a commit survives the process being killed, and a power loss can cost the
// last reports, which the next interval resends; the catalog is written
// rarely, and checkpointed (so synced) within checkpointPause of a change.
// foreign_keys is off by default in SQLite for historical reasons, and a
// node's presence and fetches must go with it.
func openConns(dsn string) (*conns, error) {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "5000")
	q.Set("_synchronous", "NORMAL")
	q.Set("_foreign_keys", "on")
	// A transaction that will write takes the write lock at BEGIN, so two
	// writers never both read and then fail to upgrade (SQLITE_BUSY that
	// busy_timeout cannot resolve).
	wq := url.Values{}
	for k, v := range q {
		wq[k] = v
	}
	wq.Set("_txlock", "immediate")
	// The writer touches every node's rows each interval; a page cache
	// that holds the presence table's hot pages (64 MiB) keeps a node's
	// first report from reading pages back from the OS.
	wq.Set("_cache_size", "-65536")
	w, err := sql.Open(writerDriver, dsn+"?"+wq.Encode())
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	rq := url.Values{}
	for k, v := range q {
		rq[k] = v
	}
	rq.Set("_query_only", "1")
	r, err := sql.Open("sqlite3", dsn+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, err
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	c, err := sql.Open("sqlite3", dsn+"?"+q.Encode())
	if err != nil {
		w.Close()
		r.Close()
		return nil, err
	}
	c.SetMaxOpenConns(1)
	c.SetMaxIdleConns(1)
	return &conns{w: w, r: r, c: c}, nil
}

// committed tells the checkpointer that a write transaction committed.
func (db *DB) committed() {
	select {
	case db.wrote <- struct{}{}:
	default:
	}
}

// checkpointer runs a passive checkpoint after writes, at most every
// checkpointPause (see walBackstopPages). Passive: it copies what no reader
// still needs and never waits for the writer or a reader. A failed
// checkpoint loses nothing (the frames stay in the WAL) and the next one,
// or the writer's own, copies them.
func (db *DB) checkpointer() {
	defer close(db.stopped)
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-db.stop:
			return
		case <-db.wrote:
		}
		var busy, frames, copied int
		if err := db.cc().QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err == nil {
			db.checkpoints.Add(1)
		}
		pause.Reset(checkpointPause)
		select {
		case <-db.stop:
			return
		case <-pause.C:
		}
	}
}

func (db *DB) init(ctx context.Context) error {
	var mode string
	if err := db.cw().QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if mode != "wal" {
		return fmt.Errorf("journal_mode is %q, not wal (is the file on a filesystem without shared memory?)", mode)
	}
	if err := db.migrate(ctx); err != nil {
		return err
	}
	st, err := prepare(ctx, db.cw())
	if err != nil {
		return err
	}
	db.cur.Load().stmts = st
	if err := db.loadMeta(ctx); err != nil {
		return err
	}
	m, err := loadMatcher(ctx, db.cw())
	if err != nil {
		return err
	}
	db.match = m
	return nil
}

// Migrations returns how many migrations this build knows; the database's
// user_version equals it after Open.
func Migrations() int {
	names, _ := migrationNames()
	return len(names)
}

func migrationNames() ([]string, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	sort.Strings(names)
	return names, err
}

func (db *DB) migrate(ctx context.Context) error {
	names, err := migrationNames()
	if err != nil {
		return err
	}
	var have int
	if err := db.cw().QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > len(names) {
		return fmt.Errorf("schema version %d is newer than this llmgw knows (%d): run the newer llmgw, or restore a backup", have, len(names))
	}
	for i := have; i < len(names); i++ {
		b, err := migrationFS.ReadFile(names[i])
		if err != nil {
			return err
		}
		tx, err := db.cw().BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration %s: %w", names[i], err)
		}
		if _, err := tx.ExecContext(ctx, string(b)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", names[i], err)
		}
		// user_version lives in the file header, which this transaction
		// writes along with the schema: both land or neither does.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", names[i], err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %s: %w", names[i], err)
		}
	}
	return nil
}

// Path is the database file.
func (db *DB) Path() string { return db.path }

// Close closes the database. Outstanding writes finish first.
func (db *DB) Close() error {
	db.stopOnce.Do(func() { close(db.stop) })
	<-db.stopped
	<-db.watched
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.unwritable() != "" {
		// Closing would write the -shm (see freeze.go); the process is
		// going anyway, and the kernel drops the mapping with it.
		return nil
	}
	err := db.cur.Load().close()
	for _, old := range db.abandoned {
		err = errors.Join(err, old.close())
	}
	return err
}

// Ping checks that the database answers a query that reads the schema, for
// readiness: a file that was removed or damaged fails here.
func (db *DB) Ping(ctx context.Context) error {
	var n int
	if err := db.cr().QueryRowContext(ctx, "SELECT count(*) FROM catalog").Scan(&n); err != nil {
		return fmt.Errorf("database %s: %w", db.path, err)
	}
	return nil
}

// IntegrityCheck runs PRAGMA integrity_check and returns an error listing
// what it found unless the answer is "ok".
func (db *DB) IntegrityCheck(ctx context.Context) error {
	rows, err := db.cr().QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return fmt.Errorf("integrity check %s: %w", db.path, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		if s != "ok" {
			problems = append(problems, s)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("integrity check %s: %s", db.path, strings.Join(problems, "; "))
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
