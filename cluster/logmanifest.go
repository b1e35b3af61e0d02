package cluster

import (
	"errors"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// segmentListKey is where raft.db keeps the list of the Raft log's segment
// files (raftlog.Manifest).
var segmentListKey = []byte("holdfast.raftlog.segments")

// boltManifest keeps the segment list of the Raft log in raft.db, whose
// writes are durable when they return: the log's files cannot vanish or
// shrink without the node noticing at its next start.
type boltManifest struct{ store *raftboltdb.BoltStore }

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
