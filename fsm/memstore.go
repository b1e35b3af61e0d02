package fsm

import (
	"fmt"
	"strings"
	"sync"

	"github.com/RaduBerinde/btreemap"
)

// MemStore is a Store in memory, for tests and tools: a copy-on-write
// B-tree, so that a batch or a view is a lazy clone of the committed tree.
type MemStore struct {
	mu      sync.RWMutex
	t       *btreemap.BTreeMap[string, []byte]
	applied uint64
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty store in memory.
func NewMemStore() *MemStore {
	return &MemStore{t: newTree()}
}

func newTree() *btreemap.BTreeMap[string, []byte] {
	return btreemap.New[string, []byte](32, strings.Compare)
}

// tree returns the committed tree, which no one changes any more.
func (m *MemStore) tree() *btreemap.BTreeMap[string, []byte] {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.t
}

// Get implements Reader.
func (m *MemStore) Get(key []byte) ([]byte, bool, error) { return treeGet(m.tree(), key) }

// Scan implements Reader.
func (m *MemStore) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	return treeScan(m.tree(), lower, upper, fn)
}

// Applied implements Store.
func (m *MemStore) Applied() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.applied
}

// Begin implements Store.
func (m *MemStore) Begin() StoreBatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &memBatch{m: m, t: m.t.Clone()}
}

// View implements Store.
func (m *MemStore) View() (View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return memView{m.t.Clone()}, nil
}

// Replace implements Store.
func (m *MemStore) Replace(index uint64, fill func(w Writer) error) error {
	b := &memBatch{m: m, t: newTree()}
	if err := fill(b); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t, m.applied = b.t, index
	return nil
}

type memBatch struct {
	m *MemStore
	t *btreemap.BTreeMap[string, []byte]
}

func (b *memBatch) Get(key []byte) ([]byte, bool, error) { return treeGet(b.t, key) }

func (b *memBatch) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	return treeScan(b.t, lower, upper, fn)
}

func (b *memBatch) Set(key, value []byte) error {
	if len(key) == 0 || key[0] == 0 {
		return fmt.Errorf("memstore: reserved key %q", key)
	}
	b.t.ReplaceOrInsert(string(key), append([]byte(nil), value...))
	return nil
}

func (b *memBatch) Delete(key []byte) error {
	b.t.Delete(string(key))
	return nil
}

func (b *memBatch) Commit(index uint64) error {
	b.m.mu.Lock()
	defer b.m.mu.Unlock()
	if index <= b.m.applied {
		return fmt.Errorf("memstore: commit index %d, but %d is applied already", index, b.m.applied)
	}
	b.m.t, b.m.applied = b.t, index
	return nil
}

func (b *memBatch) Discard() {}

type memView struct {
	t *btreemap.BTreeMap[string, []byte]
}

func (v memView) Get(key []byte) ([]byte, bool, error) { return treeGet(v.t, key) }

func (v memView) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	return treeScan(v.t, lower, upper, fn)
}

func (v memView) Close() error { return nil }

func treeGet(t *btreemap.BTreeMap[string, []byte], key []byte) ([]byte, bool, error) {
	_, v, ok := t.Get(string(key))
	if !ok {
		return nil, false, nil
	}
	return append([]byte(nil), v...), true, nil
}

func treeScan(t *btreemap.BTreeMap[string, []byte], lower, upper []byte, fn func(k, v []byte) bool) error {
	stop := btreemap.Max[string]()
	if upper != nil {
		stop = btreemap.LT(string(upper))
	}
	t.AscendFunc(btreemap.GE(string(lower)), stop, func(k string, v []byte) bool {
		return fn([]byte(k), v)
	})
	return nil
}
