package statestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/holdfast/holdfast/internal/atomicfile"
)

// ErrClosed is returned by a store used after Close.
var ErrClosed = errors.New("state store: closed")

// database is one open pebble database of a store, with the references
// to it: the store's own while it is the live one, and one for each View
// and each call in progress on it. An install replaces the live database
// while views of the old one may still be reading it (a backup, a key
// filter build); the last reference closes it and, once it was replaced,
// removes its directory.
type database struct {
	*pebble.DB
	name string // its directory, under the store's root
	refs atomic.Int64
	// replaced is set once an install made another database the live one.
	replaced atomic.Bool
}

func newDatabase(db *pebble.DB, name string) *database {
	d := &database{DB: db, name: name}
	d.refs.Store(1) // the store's
	return d
}

// tryRef takes a reference unless the database is closed or closing.
func (d *database) tryRef() bool {
	for {
		n := d.refs.Load()
		if n == 0 {
			return false
		}
		if d.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// acquire returns the live database with a reference taken, which the
// caller gives back with release.
func (s *Store) acquire() (*database, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	for {
		d := s.live.Load()
		if d.tryRef() {
			return d, nil
		}
		if s.live.Load() == d {
			return nil, ErrClosed
		}
		// An install swapped it meanwhile: take the new one.
	}
}

// release gives back a reference to d; the last one closes it, and
// removes its directory if it was replaced. An error is returned only by
// the call that closed it; for a replaced database it is logged too,
// since that call is a reader's, which has no use for it.
func (s *Store) release(d *database) error {
	if d.refs.Add(-1) != 0 {
		return nil
	}
	err := d.Close()
	if err != nil {
		err = fmt.Errorf("state store: close %s: %w", d.name, err)
	}
	if d.replaced.Load() {
		if rerr := s.removeReplaced(d.name); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if err != nil {
			s.opts.Logger.Warn("state store: a replaced database was not closed and removed cleanly; a restart removes what is left of it", "dir", filepath.Join(s.root, d.name), "error", err)
		}
	}
	return err
}

// removeReplaced removes the directory of a database an install replaced
// and syncs the root.
func (s *Store) removeReplaced(name string) error {
	if err := os.RemoveAll(filepath.Join(s.root, name)); err != nil {
		return fmt.Errorf("state store: remove the replaced database %s: %w", name, err)
	}
	if err := atomicfile.SyncDir(s.root); err != nil {
		return fmt.Errorf("state store: remove the replaced database %s: %w", name, err)
	}
	return nil
}

// with runs f on the live database, holding a reference meanwhile.
func (s *Store) with(f func(*database) error) error {
	d, err := s.acquire()
	if err != nil {
		return err
	}
	defer func() { _ = s.release(d) }()
	return f(d)
}
