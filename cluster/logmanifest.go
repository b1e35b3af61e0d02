package cluster

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/holdfast/holdfast/internal/raftlog"
)

// segmentListKey is where raft.db keeps the list of the Raft log's segment
// files (raftlog.Manifest).
var segmentListKey = []byte("holdfast.raftlog.segments")

// boltManifest keeps the segment list of the Raft log in raft.db, whose
// writes are durable when they return: the log's files cannot vanish or
// shrink without the node noticing at its next start.
type boltManifest struct{ store raft.StableStore }

// Load implements raftlog.Manifest.
func (m boltManifest) Load() ([]byte, error) {
	b, err := m.store.Get(segmentListKey)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return nil, nil
	}
	return b, err
}

// Save implements raftlog.Manifest.
func (m boltManifest) Save(b []byte) error { return m.store.Set(segmentListKey, b) }

// keyCurrentTerm is the key under which Raft keeps its current term in
// the stable store.
var keyCurrentTerm = []byte("CurrentTerm")

// checkTermCoversLog refuses a raft.db that remembers an older term than
// the newest entry of the log beside it: Raft records a term before it
// stores any entry of that term, so such a raft.db was lost or replaced,
// and with it the vote this node may have cast in the terms it forgot.
func checkTermCoversLog(stable raft.StableStore, logs raft.LogStore) error {
	last, err := logs.LastIndex()
	if err != nil || last == 0 {
		return err
	}
	var l raft.Log
	if err := logs.GetLog(last, &l); err != nil {
		return fmt.Errorf("read the last log entry %d: %w", last, err)
	}
	term, err := stable.GetUint64(keyCurrentTerm)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return fmt.Errorf("read the current term: %w", err)
	}
	if term < l.Term {
		return fmt.Errorf("%w: raft.db remembers term %d, but the log holds entry %d of term %d: raft.db was lost or replaced, and with it the votes this node cast",
			raftlog.ErrCorrupt, term, last, l.Term)
	}
	return nil
}
