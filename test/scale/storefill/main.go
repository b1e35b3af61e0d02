package main

import (
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/holdfast/holdfast/internal/statestore"
	"github.com/holdfast/holdfast/test/scale/measure"
)

// store is what the fill needs of an engine.
type store interface {
	// apply writes one batch: its puts and the applied index, unsynced.
	apply(kvs [][2][]byte, index uint64) error
	get(key []byte) (bool, error)
	// snapshot makes a consistent copy in dir, however the engine does it.
	snapshot(dir string) error
	close() error
}

func main() {
	engine := flag.String("engine", "pebble", "pebble or bolt")
	dir := flag.String("dir", "", "data directory (default: a new temporary one, removed at the end)")
	leases := flag.Int("leases", 1000000, "completed leases to write")
	jobs := flag.Int("jobs", 200000, "jobs to write")
	resultBytes := flag.Int("result", 512, "bytes of each lease's result")
	payloadBytes := flag.Int("payload", 1024, "bytes of each job's payload")
	batch := flag.Int("batch", 256, "records per apply batch")
	flag.Parse()
	if err := run(*engine, *dir, *leases, *jobs, *resultBytes, *payloadBytes, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "storefill:", err)
		os.Exit(1)
	}
}

func run(engine, dir string, leases, jobs, resultBytes, payloadBytes, batch int) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "storefill-")
		if err != nil {
			return fmt.Errorf("temporary directory: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	open := func() (store, error) { return openStore(engine, filepath.Join(dir, "store")) }
	s, err := open()
	if err != nil {
		return err
	}
	f := &filler{s: s, batch: batch, rng: rand.New(rand.NewChaCha8([32]byte{1}))}
	fmt.Printf("engine %s, %d leases with %d-byte results, %d jobs with %d-byte payloads, %d records a batch\n",
		engine, leases, resultBytes, jobs, payloadBytes, batch)

	start := time.Now()
	if err := f.fill(leases, jobs, resultBytes, payloadBytes); err != nil {
		return err
	}
	elapsed := time.Since(start)
	records := leases + jobs
	fmt.Printf("fill: %.0f records/s (%.1f s); peak rss %d MiB (anon %d MiB, file %d MiB at the end)\n",
		float64(records)/elapsed.Seconds(), elapsed.Seconds(), f.peakRSS>>20, measure.Memory("RssAnon")>>20, measure.Memory("RssFile")>>20)

	reads := min(records, 200000)
	start = time.Now()
	for range reads {
		i := f.rng.IntN(leases)
		ok, err := s.get(leaseKey(uint64(i)))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("lease %d not found", i)
		}
	}
	fmt.Printf("point reads: %.0f/s\n", float64(reads)/time.Since(start).Seconds())

	if err := s.close(); err != nil {
		return err
	}
	seen := make(map[uint64]bool)
	disk, err := measure.DiskBytes(filepath.Join(dir, "store"), seen)
	if err != nil {
		return err
	}
	fmt.Printf("disk: %d MiB for %d MiB of raw records (%.2fx)\n", disk>>20, f.raw>>20, float64(disk)/float64(f.raw))

	start = time.Now()
	s, err = open()
	if err != nil {
		return err
	}
	if ok, err := s.get(leaseKey(0)); err != nil || !ok {
		return fmt.Errorf("first lease after reopen: found %v, %v", ok, err)
	}
	fmt.Printf("reopen: %.3f s\n", time.Since(start).Seconds())
	f.s = s
	if err := f.fill(leases/100, jobs/100, resultBytes, payloadBytes); err != nil {
		return err
	}
	start = time.Now()
	if err := s.snapshot(filepath.Join(dir, "snap")); err != nil {
		return err
	}
	if _, err := measure.DiskBytes(filepath.Join(dir, "store"), seen); err != nil {
		return err
	}
	snap, err := measure.DiskBytes(filepath.Join(dir, "snap"), seen)
	if err != nil {
		return err
	}
	fmt.Printf("snapshot after 1%% more: %.3f s, %d MiB newly written\n", time.Since(start).Seconds(), snap>>20)
	return s.close()
}

// filler writes records in batches and keeps count.
type filler struct {
	s       store
	batch   int
	rng     *rand.Rand
	index   uint64 // last applied index
	next    uint64 // next record number
	raw     int64  // bytes of keys and values written
	peakRSS int64
	kvs     [][2][]byte
}

func (f *filler) fill(leases, jobs, resultBytes, payloadBytes int) error {
	for i := range leases + jobs {
		n := f.next
		f.next++
		at := int64(1_800_000_000_000 + n) // lifecycle ends, in order of creation
		if i < leases {
			k := leaseKey(n)
			f.add(k, f.value(96+resultBytes))
			f.add(expiryKey(at, k), nil)
		} else {
			k := jobKey(n)
			f.add(k, f.value(80+payloadBytes))
			f.add(expiryKey(at, k), nil)
		}
		if len(f.kvs) >= 2*f.batch {
			if err := f.flush(); err != nil {
				return err
			}
		}
	}
	return f.flush()
}

func (f *filler) add(k, v []byte) {
	f.kvs = append(f.kvs, [2][]byte{k, v})
	f.raw += int64(len(k) + len(v))
}

func (f *filler) value(n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], f.rng.Uint64())
		copy(b[i:], w[:])
	}
	return b
}

func (f *filler) flush() error {
	if len(f.kvs) == 0 {
		return nil
	}
	f.index++
	if err := f.s.apply(f.kvs, f.index); err != nil {
		return err
	}
	f.kvs = f.kvs[:0]
	if f.index%64 == 0 {
		f.peakRSS = max(f.peakRSS, measure.Memory("VmRSS"))
	}
	return nil
}

func leaseKey(n uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	h := sha256.Sum256(b[:])
	return append([]byte{'l'}, h[:]...)
}

func jobKey(n uint64) []byte {
	k := make([]byte, 1+16+8)
	k[0] = 'j'
	h := sha256.Sum256([]byte(strconv.FormatUint(n/100, 10))) // 100 jobs a queue
	copy(k[1:17], h[:16])
	binary.BigEndian.PutUint64(k[17:], n)
	return k
}

func expiryKey(at int64, k []byte) []byte {
	b := make([]byte, 1+8, 1+8+len(k))
	b[0] = 't'
	binary.BigEndian.PutUint64(b[1:], uint64(at))
	return append(b, k...)
}

var appliedKey = []byte("\x00applied")

func openStore(engine, dir string) (store, error) {
	switch engine {
	case "pebble":
		return openPebble(dir)
	case "bolt":
		return openBolt(dir)
	}
	return nil, fmt.Errorf("unknown engine %q", engine)
}

// pebbleStore is holdfast's own state store (internal/statestore), on
// pebble, with the options the nodes use.
type pebbleStore struct{ s *statestore.Store }

func openPebble(dir string) (*pebbleStore, error) {
	s, err := statestore.Open(dir, statestore.Options{})
	if err != nil {
		return nil, err
	}
	return &pebbleStore{s: s}, nil
}

func (p *pebbleStore) apply(kvs [][2][]byte, index uint64) error {
	b := p.s.Begin()
	for _, kv := range kvs {
		if err := b.Set(kv[0], kv[1]); err != nil {
			b.Discard()
			return err
		}
	}
	return b.Commit(index)
}

func (p *pebbleStore) get(key []byte) (bool, error) {
	_, ok, err := p.s.Get(key)
	return ok, err
}

func (p *pebbleStore) snapshot(dir string) error { return p.s.Checkpoint(dir) }

// close flushes the store first: with the Raft log as its write-ahead
// log, the store keeps only what was flushed.
func (p *pebbleStore) close() error { return p.s.Close() }

type boltStore struct{ db *bolt.DB }

var boltBucket = []byte("state")

func openBolt(dir string) (*boltStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "state.db"), 0o600, &bolt.Options{
		NoSync:         true, // the Raft log is the write-ahead log
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, fmt.Errorf("open bolt: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	})
	return &boltStore{db: db}, err
}

func (s *boltStore) apply(kvs [][2][]byte, index uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		for _, kv := range kvs {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], index)
		return b.Put(appliedKey, v[:])
	})
}

func (s *boltStore) get(key []byte) (bool, error) {
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		ok = tx.Bucket(boltBucket).Get(key) != nil
		return nil
	})
	return ok, err
}

// snapshot copies the whole file from a read transaction: bolt has no
// cheaper consistent copy.
func (s *boltStore) snapshot(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := s.db.Sync(); err != nil {
		return err
	}
	return s.db.View(func(tx *bolt.Tx) error { return tx.CopyFile(filepath.Join(dir, "state.db"), 0o600) })
}

func (s *boltStore) close() error { return s.db.Close() }
