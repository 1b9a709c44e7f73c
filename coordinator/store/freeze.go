package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// A database made read-only under a running coordinator must give 503s,
// never a crash. SQLite keeps its WAL index in the -shm file mapped
// shared, and every transaction, readers' included, writes into that
// mapping. Once ext4 is told a file is immutable (chattr +i), or the
// filesystem goes read-only after an error, the next write to a clean page
// of the mapping faults and the kernel answers SIGBUS: inside cgo, which no
// Go code can recover from. The coordinator died of it twice (a report's
// commit, the checkpointer's wal_checkpoint), and a probe that wrote would
// only have died sooner.
//
// So the store looks before sqlite touches the files: watch checks every
// watchEvery, and CanWrite and every ingest before their write, whether
// the files can be written (the filesystem's read-only flag, each file's
// immutable and append-only flags), and when they cannot it freezes: the
// connections are swapped for closed ones (every call fails at once with
// ErrFrozen's reason, without reaching sqlite) and the old ones are closed,
// which unmaps the -shm. Reads fail too while frozen: they write read marks
// into the same mapping. When the files can be written again, the
// connections are opened anew and the store carries on; nothing it holds
// in memory changed meanwhile, since nothing was written.
//
// What this cannot close: a query already inside sqlite when the flag
// changes, or one started within watchEvery of the change, may still touch
// a clean page of the mapping. The window is watchEvery wide instead of
// the coordinator's whole remaining life.

// ErrFrozen is the error of every store call while the database files
// cannot be written. Test for it with errors.Is.
var ErrFrozen = errors.New("the database cannot be written")

// watchEvery is how often watch looks at the files.
const watchEvery = 100 * time.Millisecond

// unwritable says why the database files cannot be written, or "".
func (db *DB) unwritable() string {
	var sfs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(db.path), &sfs); err == nil && sfs.Flags&unix.ST_RDONLY != 0 {
		return fmt.Sprintf("the filesystem holding %s is mounted read-only", db.path)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		p := db.path + suffix
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue // a missing -wal or -shm is made by sqlite as needed
		}
		flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
		unix.Close(fd)
		if err == nil && flags&(fsImmutableFL|fsAppendFL) != 0 {
			return fmt.Sprintf("%s is marked immutable or append-only (chattr +i/+a)", p)
		}
	}
	return ""
}

// The inode flags of FS_IOC_GETFLAGS (linux/fs.h), which x/sys/unix does
// not name.
const (
	fsImmutableFL = 0x00000010
	fsAppendFL    = 0x00000020
)

// Frozen says why the store is frozen, or "" when it is not.
func (db *DB) Frozen() string {
	if why := db.frozen.Load(); why != nil {
		return *why
	}
	return ""
}

// checkFrozen freezes the store when the files cannot be written, and
// returns ErrFrozen with the reason while it is frozen.
func (db *DB) checkFrozen() error {
	if why := db.unwritable(); why != "" {
		db.freeze(why)
	}
	if why := db.Frozen(); why != "" {
		return fmt.Errorf("%w: %s", ErrFrozen, why)
	}
	return nil
}

// closedConns are connections every call on which fails without reaching
// sqlite: sql.Open connects lazily, and a closed sql.DB refuses at once.
func closedConns() *conns {
	cs := &conns{}
	for _, p := range []**sql.DB{&cs.w, &cs.r, &cs.c} {
		d, _ := sql.Open("sqlite3", "file:/nonexistent?mode=ro")
		d.Close()
		*p = d
	}
	return cs
}

// freeze swaps the connections for closed ones and closes the old ones.
func (db *DB) freeze(why string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.frozen.Load() != nil {
		return
	}
	db.frozen.Store(&why)
	// The old connections are set aside, not closed: closing the last
	// connection to a WAL database checkpoints and writes the -shm, which
	// is the very SIGBUS this avoids. Kept referenced, since the driver
	// closes a connection the garbage collector finds; closed by thaw or
	// Close once the files can be written. One set per freeze.
	db.abandoned = append(db.abandoned, db.cur.Swap(closedConns()))
}

// thaw opens the connections anew once the files can be written again.
func (db *DB) thaw(ctx context.Context) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.frozen.Load() == nil {
		return nil
	}
	cs, err := openConns(db.dsn)
	if err != nil {
		return err
	}
	st, err := prepare(ctx, cs.w)
	if err != nil {
		cs.close()
		return err
	}
	cs.stmts = st
	db.cur.Swap(cs).close()
	for _, old := range db.abandoned {
		old.close()
	}
	db.abandoned = nil
	db.frozen.Store(nil)
	return nil
}

// watch freezes and thaws the store as the files' writability changes,
// until Close.
func (db *DB) watch() {
	defer close(db.watched)
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-db.stop:
			return
		case <-t.C:
		}
		why := db.unwritable()
		switch {
		case why != "":
			db.freeze(why)
		case db.Frozen() != "":
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := db.thaw(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "llmgw store: the database files look writable again, but reopening them failed: %v\n", err)
			}
			cancel()
		}
	}
}
