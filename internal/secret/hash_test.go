package secret

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"testing"
)

// frame builds the documented hash input independently of sum, so a change
// to the stored format fails this test.
func frame(parts ...string) Hash {
	var b []byte
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		b = append(b, n[:]...)
		b = append(b, p...)
	}
	return sha256.Sum256(b)
}

func TestHashFormat(t *testing.T) {
	tests := []struct {
		name string
		got  Hash
		want Hash
	}{
		{"lease id", LeaseID("ns_x", "k"), frame("holdfast/v1/lease-id", "ns_x", "k")},
		{"lease id without namespace", LeaseID("", "k"), frame("holdfast/v1/lease-id", "", "k")},
		{"fingerprint", FingerprintHash("ns_x", "k", "fp"), frame("holdfast/v1/fingerprint", "ns_x", "k", "fp")},
		{"owner token", OwnerTokenHash("own_x"), frame("holdfast/v1/owner-token", "own_x")},
		{"role token", RoleTokenHash("ab"), frame("holdfast/v1/role-token", "ab")},
		{"receipt", ReceiptHash("cd"), frame("holdfast/v1/receipt", "cd")},
		{"client", ClientHash("192.0.2.1"), frame("holdfast/v1/client", "192.0.2.1")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("hash = %s, want %s", tc.got, tc.want)
			}
		})
	}
}

func TestHashGolden(t *testing.T) {
	// Frozen: stored state is keyed by these values. Computed independently
	// (Python hashlib over the documented framing), not copied from the code.
	const want = "844f3c5117c240f9a72a3632e865c754589002bf41038b50408af76329fcf493"
	got := LeaseID("ns_XbO8a6V9e5dMWYqghfPV3ykHTNpR3oZ0fQJm4l7K2nE", "invoice:2026-09-05").String()
	if got != want {
		t.Fatalf("LeaseID golden = %s, want %s", got, want)
	}
}

func TestHashFraming(t *testing.T) {
	tests := []struct {
		name string
		a, b Hash
	}{
		{"lease id field boundary", LeaseID("ab", "c"), LeaseID("a", "bc")},
		{"lease id empty namespace", LeaseID("", "abc"), LeaseID("abc", "")},
		{"lease id swapped", LeaseID("a", "b"), LeaseID("b", "a")},
		{"fingerprint boundary key/fp", FingerprintHash("n", "ab", "c"), FingerprintHash("n", "a", "bc")},
		{"fingerprint boundary ns/key", FingerprintHash("ab", "c", "f"), FingerprintHash("a", "bc", "f")},
		{"fingerprint bound to namespace", FingerprintHash("n1", "k", "f"), FingerprintHash("n2", "k", "f")},
		{"fingerprint bound to key", FingerprintHash("n", "k1", "f"), FingerprintHash("n", "k2", "f")},
		{"length bytes in field", LeaseID("", "\x00\x00\x00\x00\x00\x00\x00\x01a"), LeaseID("a", "")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.a == tc.b {
				t.Fatalf("collision: %s", tc.a)
			}
		})
	}
}

func TestHashPurposesDistinct(t *testing.T) {
	for _, in := range []string{"x", "ns_XbO8a6V9e5dMWYqghfPV3ykHTNpR3oZ0fQJm4l7K2nE", strings.Repeat("f", 64)} {
		hashes := map[string]Hash{
			"LeaseID(in,'')":            LeaseID(in, ""),
			"LeaseID('',in)":            LeaseID("", in),
			"FingerprintHash('','',in)": FingerprintHash("", "", in),
			"FingerprintHash(in,'','')": FingerprintHash(in, "", ""),
			"OwnerTokenHash(in)":        OwnerTokenHash(in),
			"RoleTokenHash(in)":         RoleTokenHash(in),
			"ReceiptHash(in)":           ReceiptHash(in),
			"ClientHash(in)":            ClientHash(in),
			"plain sha256(in)":          sha256.Sum256([]byte(in)),
			"LeaseID('','')":            LeaseID("", ""),
			"FingerprintHash('','','')": FingerprintHash("", "", ""),
			"OwnerTokenHash('')":        OwnerTokenHash(""),
			"RoleTokenHash('')":         RoleTokenHash(""),
			"ReceiptHash('')":           ReceiptHash(""),
			"ClientHash('')":            ClientHash(""),
		}
		seen := map[Hash]string{}
		for name, h := range hashes {
			if other, dup := seen[h]; dup {
				t.Errorf("input %q: %s == %s", in, name, other)
			}
			seen[h] = name
		}
	}
}

func TestHashDeterministic(t *testing.T) {
	fns := []struct {
		name string
		f    func() Hash
	}{
		{"LeaseID", func() Hash { return LeaseID("n", "k") }},
		{"FingerprintHash", func() Hash { return FingerprintHash("n", "k", "f") }},
		{"OwnerTokenHash", func() Hash { return OwnerTokenHash("t") }},
		{"RoleTokenHash", func() Hash { return RoleTokenHash("t") }},
		{"ReceiptHash", func() Hash { return ReceiptHash("r") }},
		{"ClientHash", func() Hash { return ClientHash("::1") }},
	}
	for _, tc := range fns {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.f(), tc.f()
			if a != b {
				t.Fatalf("%s differs between calls: %s vs %s", tc.name, a, b)
			}
			if a.IsZero() {
				t.Fatalf("%s returned the zero hash", tc.name)
			}
		})
	}
}

func TestHashMethods(t *testing.T) {
	a := OwnerTokenHash("a")
	b := OwnerTokenHash("b")
	lastBit := a
	lastBit[31] ^= 1
	tests := []struct {
		name string
		x, y Hash
		want bool
	}{
		{"same", a, a, true},
		{"copy", a, OwnerTokenHash("a"), true},
		{"different", a, b, false},
		{"last bit differs", a, lastBit, false},
		{"zero vs zero", Hash{}, Hash{}, true},
		{"zero vs hash", Hash{}, a, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.x.Equal(tc.y); got != tc.want {
				t.Fatalf("Equal = %v, want %v", got, tc.want)
			}
		})
	}
	if !(Hash{}).IsZero() || a.IsZero() {
		t.Fatalf("IsZero wrong: zero %v, hash %v", (Hash{}).IsZero(), a.IsZero())
	}
	var h Hash
	h[0], h[31] = 0xab, 0x01
	if got, want := h.String(), "ab"+strings.Repeat("0", 60)+"01"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
