package keyfilter

import "sync/atomic"

const (
	blockBits    = 512 // one 64-byte cache line
	bitsPerKey   = 10  // about 1% false positives at capacity
	probesPerKey = 7   // 9-bit positions taken from one 64-bit hash
)

type block [blockBits / 64]atomic.Uint64

// Filter is safe for concurrent Add and MayContain.
type Filter struct {
	blocks   []block
	capacity int64
	added    atomic.Int64
}

// New returns an empty filter sized for capacity keys.
func New(capacity int) *Filter {
	capacity = max(capacity, 1024)
	n := (capacity*bitsPerKey + blockBits - 1) / blockBits
	return &Filter{blocks: make([]block, n), capacity: int64(capacity)}
}

// Add records key.
func (f *Filter) Add(key []byte) {
	b, bits := f.locate(key)
	for i := 0; i < probesPerKey; i++ {
		p := bits & (blockBits - 1)
		bits >>= 9
		b[p/64].Or(1 << (p % 64))
	}
	f.added.Add(1)
}

// MayContain is false only for a key never added.
func (f *Filter) MayContain(key []byte) bool {
	b, bits := f.locate(key)
	for i := 0; i < probesPerKey; i++ {
		p := bits & (blockBits - 1)
		bits >>= 9
		if b[p/64].Load()&(1<<(p%64)) == 0 {
			return false
		}
	}
	return true
}

// Full reports whether the filter took more keys than it was sized for,
// so that its false positives grow: time to build a new one.
func (f *Filter) Full() bool { return f.added.Load() > f.capacity }

// Added is the number of Add calls (a key added twice counts twice).
func (f *Filter) Added() int64 { return f.added.Load() }

// Bytes is the filter's size in memory.
func (f *Filter) Bytes() int { return len(f.blocks) * blockBits / 8 }

// locate picks key's block and the bits of its probes.
func (f *Filter) locate(key []byte) (*block, uint64) {
	h := uint64(14695981039346656037) // FNV-1a, then mixed twice
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h1 := mix(h)
	h2 := mix(h ^ 0x9e3779b97f4a7c15)
	i := (h1 >> 32) * uint64(len(f.blocks)) >> 32
	return &f.blocks[i], h2
}

// mix is a 64-bit finalizer (murmur3's): every input bit moves every
// output bit.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb93e185ec53b
	h ^= h >> 33
	return h
}
