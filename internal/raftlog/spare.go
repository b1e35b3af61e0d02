package raftlog

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// spareRetry is how long a failed preparation of the next segment waits
// before it tries again.
const spareRetry = time.Second

// spare prepares, in the background, the zero-filled file the next segment
// is made from. It never takes the last free space of the file system: it
// leaves at least one segment's worth for snapshots and raft.db, and while
// there is no room it tries again every spareRetry, reporting the failure
// as the store's health.
type spare struct {
	s    *Store
	stop chan struct{}
	wg   sync.WaitGroup

	pause time.Duration // the rest between two chunks of the file

	mu      sync.Mutex
	ready   bool          // the prepared file exists
	running bool          // the preparing goroutine runs
	attempt chan struct{} // closed when the attempt under way ends; nil between attempts
	// rush, made with each attempt, is closed when an append waits for
	// that attempt (see take): the rest of the file is then written
	// without rests, since the log waits for it.
	rush chan struct{}
}

func (p *spare) init(s *Store, pause time.Duration) {
	p.s = s
	p.stop = make(chan struct{})
	p.pause = cmp.Or(pause, fillPause)
}

// newAttempt records an attempt about to begin. Called under mu.
func (p *spare) newAttempt() (done, rush chan struct{}) {
	p.attempt = make(chan struct{})
	p.rush = make(chan struct{})
	return p.attempt, p.rush
}

// path is where the prepared file lives.
func (p *spare) path() string { return filepath.Join(p.s.dir, spareName) }

// start prepares the next segment file unless it is ready or being prepared.
func (p *spare) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready || p.running {
		return
	}
	p.running = true
	done, rush := p.newAttempt()
	p.wg.Add(1)
	go p.loop(done, rush)
}

// loop prepares the spare until it succeeds or the store closes; done and
// rush are the first attempt's, made by start so that take waits for it.
func (p *spare) loop(done, rush chan struct{}) {
	defer p.wg.Done()
	for {
		if done == nil {
			p.mu.Lock()
			done, rush = p.newAttempt()
			p.mu.Unlock()
		}

		err := p.prepare(rush)
		if errors.Is(err, errClosed) {
			err = nil // not a failure of the disk; the store is closing
		}

		p.mu.Lock()
		p.attempt = nil
		if err == nil {
			p.ready, p.running = true, false
		}
		close(done)
		done = nil
		p.mu.Unlock()
		p.s.health.setPrep(err)
		if err == nil {
			return
		}
		select {
		case <-p.stop:
			p.mu.Lock()
			p.running = false
			p.mu.Unlock()
			return
		case <-time.After(spareRetry):
		}
	}
}

// take moves the prepared file to path and reports true, waiting for an
// attempt under way; it reports false when no prepared file is ready.
func (p *spare) take(path string) (bool, error) {
	p.mu.Lock()
	if done := p.attempt; done != nil && !p.ready {
		select {
		case <-p.rush: // already rushed by another append
		default:
			close(p.rush)
		}
		p.mu.Unlock()
		<-done
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	if !p.ready {
		return false, nil
	}
	p.ready = false
	if err := p.s.fs.Rename(p.path(), path); err != nil {
		return false, fmt.Errorf("raftlog: create segment: %w", classify(err))
	}
	return true, nil
}

// prepare writes the spare file, full of zeros, after checking that the
// file system keeps room for one more segment beside it; once rush is
// closed it writes without rests.
func (p *spare) prepare(rush <-chan struct{}) error {
	s := p.s
	path := p.path()
	// A spare left by an earlier run may be partly written: make it anew.
	if err := s.fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("raftlog: remove %s: %w", path, classify(err))
	}
	if err := s.room(); err != nil {
		return err
	}
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return fmt.Errorf("raftlog: create %s: %w", path, classify(err))
	}
	err = fill(f, s.segSize, p.stop, p.pause, rush)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = classify(cerr)
	}
	if err != nil {
		// Give the space back: a half-made spare is of no use.
		_ = s.fs.Remove(path)
		return fmt.Errorf("raftlog: prepare %s: %w", path, err)
	}
	return nil
}

// errClosed ends a preparation when the store closes.
var errClosed = errors.New("store closed")

// fillChunk is how much of a spare is written, and written out to the
// disk, at a time; fillPause is the rest between two chunks.
//
// A spare written whole and then synced puts a segment's worth of data in
// the disk's queue at once, and on a shared disk every fdatasync of the
// log (this node's and any other's) waits behind it: 100 to 200 ms for a
// 16 MiB segment on a small virtual disk, in which no append is
// acknowledged. Written a chunk at a time, each chunk out to the disk
// before the next, an append waits behind one chunk at most, so the chunk
// is small: with 1 MiB chunks the enqueue's p99 under test/perf/profile.sh
// latency was 14.0 and 14.7 ms, with 256 KiB chunks 12.0 and 11.8. A 16
// MiB spare then takes 64 rests of 5 ms plus its writing, 0.4 to 0.8 s
// on a small virtual disk, while the log takes seconds to fill a segment
// with small entries; an append that needs the spare before it is done
// lifts the rests (see spare.rush).
const (
	fillChunk = 256 << 10
	fillPause = 5 * time.Millisecond
)

// fill writes size zero bytes to f, a chunk at a time, resting pause
// between two chunks until rush is closed (a nil rush never is), and syncs
// it.
func fill(f segFile, size int64, stop <-chan struct{}, pause time.Duration, rush <-chan struct{}) error {
	zeros := make([]byte, min(size, fillChunk))
	rest := time.NewTimer(pause)
	defer rest.Stop()
	for off := int64(0); off < size; off += int64(len(zeros)) {
		if off == 0 {
			select {
			case <-stop:
				return errClosed
			default:
			}
		} else {
			select {
			case <-stop:
				return errClosed
			case <-rush:
			case <-rest.C:
			}
		}
		n := min(int64(len(zeros)), size-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return classify(err)
		}
		if err := f.WriteOut(off, n); err != nil {
			return classify(err)
		}
		rest.Reset(pause)
	}
	if err := f.Datasync(); err != nil {
		return classify(err)
	}
	return nil
}

// close stops the preparation and waits for it.
func (p *spare) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// room reports, as an error wrapping ErrNoSpace, that the file system has
// less than two segments' worth of free space: the room the store asks
// before it prepares a segment, so the preparation never takes the last
// free space, nor an append the space snapshots and raft.db need.
func (s *Store) room() error {
	free, err := s.fs.Free(s.dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	if free >= 0 && free < 2*s.segSize {
		return fmt.Errorf("%w: %d bytes free in %s, the next %d-byte log segment is made only with as much again to spare",
			ErrNoSpace, free, s.dir, s.segSize)
	}
	return nil
}

// watchSpace, started when an append fails for want of space, ends that
// condition once the file system has room again (see room), checking every
// spareRetry: a node kept out of elections while its log cannot be written
// may have no leader to send it the append that would show it can.
func (s *Store) watchSpace() {
	s.health.mu.Lock()
	if s.health.watching {
		s.health.mu.Unlock()
		return
	}
	s.health.watching = true
	s.health.mu.Unlock()
	s.spare.wg.Add(1)
	go func() {
		defer s.spare.wg.Done()
		defer func() {
			s.health.mu.Lock()
			s.health.watching = false
			s.health.mu.Unlock()
		}()
		for {
			select {
			case <-s.spare.stop:
				return
			case <-time.After(spareRetry):
			}
			if s.room() != nil {
				continue
			}
			done := false
			s.health.update(func() {
				if errors.Is(s.health.write, ErrNoSpace) {
					s.health.write = nil
				}
				done = s.health.write == nil
			})
			if done {
				return
			}
		}
	}()
}
