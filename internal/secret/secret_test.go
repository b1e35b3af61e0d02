package secret

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
)

const generations = 1000

func TestNewBase64Secrets(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		gen    func() (string, error)
		valid  func(string) bool
	}{
		{"namespace", "ns_", NewNamespace, ValidNamespace},
		{"owner token", "own_", NewOwnerToken, ValidOwnerToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(map[string]bool, generations)
			for i := 0; i < generations; i++ {
				s, err := tc.gen()
				if err != nil {
					t.Fatalf("generate: %v", err)
				}
				if len(s) != len(tc.prefix)+43 {
					t.Fatalf("%q has length %d, want %d", s, len(s), len(tc.prefix)+43)
				}
				if !strings.HasPrefix(s, tc.prefix) {
					t.Fatalf("%q lacks prefix %q", s, tc.prefix)
				}
				body := s[len(tc.prefix):]
				if strings.Trim(body, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
					t.Fatalf("%q has characters outside base64url", s)
				}
				raw, err := base64.RawURLEncoding.DecodeString(body)
				if err != nil || len(raw) != 32 {
					t.Fatalf("%q decodes to %d bytes, err %v; want 32 bytes", s, len(raw), err)
				}
				if !tc.valid(s) {
					t.Fatalf("validator rejects generated %q", s)
				}
				if seen[s] {
					t.Fatalf("duplicate after %d generations: %q", i, s)
				}
				seen[s] = true
			}
		})
	}
}

func TestNewToken(t *testing.T) {
	seen := make(map[string]bool, generations)
	for i := 0; i < generations; i++ {
		s, err := NewToken()
		if err != nil {
			t.Fatalf("NewToken: %v", err)
		}
		if len(s) != 64 || strings.Trim(s, "0123456789abcdef") != "" {
			t.Fatalf("%q is not 64 lowercase hex characters", s)
		}
		if !ValidToken(s) {
			t.Fatalf("ValidToken rejects generated %q", s)
		}
		if seen[s] {
			t.Fatalf("duplicate after %d generations: %q", i, s)
		}
		seen[s] = true
	}
}

func TestNewIDAndParseID(t *testing.T) {
	seen := make(map[ID]bool, generations)
	for i := 0; i < generations; i++ {
		id, err := NewID()
		if err != nil {
			t.Fatalf("NewID: %v", err)
		}
		s := id.String()
		if len(s) != 32 || strings.Trim(s, "0123456789abcdef") != "" {
			t.Fatalf("%q is not 32 lowercase hex characters", s)
		}
		back, ok := ParseID(s)
		if !ok || back != id {
			t.Fatalf("ParseID(%q) = %v, %v; want %v, true", s, back, ok, id)
		}
		if seen[id] {
			t.Fatalf("duplicate after %d generations: %s", i, s)
		}
		seen[id] = true
	}
}

func TestParseID(t *testing.T) {
	const good = "00112233445566778899aabbccddeeff"
	want := ID{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"valid", good, true},
		{"one short", good[:31], false},
		{"one long", good + "0", false},
		{"uppercase", strings.ToUpper(good), false},
		{"one uppercase", good[:31] + "F", false},
		{"non-hex", good[:31] + "g", false},
		{"empty", "", false},
		{"space padded", " " + good[1:], false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := ParseID(tc.in)
			if ok != tc.ok {
				t.Fatalf("ParseID(%q) ok = %v, want %v", tc.in, ok, tc.ok)
			}
			if ok && id != want {
				t.Fatalf("ParseID(%q) = %x, want %x", tc.in, id, want)
			}
			if !ok && id != (ID{}) {
				t.Fatalf("ParseID(%q) returned non-zero ID %x on failure", tc.in, id)
			}
		})
	}
}

func TestValidators(t *testing.T) {
	// The spec's own example values.
	const ns = "ns_XbO8a6V9e5dMWYqghfPV3ykHTNpR3oZ0fQJm4l7K2nE"
	const own = "own_lCzWFx9BTqNkKlQJYu8jXdDX7n8h4xTJsU5BzPq3yLk"
	const tok = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name  string
		valid func(string) bool
		in    string
		want  bool
	}{
		{"namespace example", ValidNamespace, ns, true},
		{"namespace one short", ValidNamespace, ns[:len(ns)-1], false},
		{"namespace one long", ValidNamespace, ns + "A", false},
		{"namespace wrong prefix", ValidNamespace, "nx_" + ns[3:], false},
		{"namespace owner prefix", ValidNamespace, "own_" + ns[3:], false},
		{"namespace no prefix", ValidNamespace, ns[3:], false},
		{"namespace standard base64 +", ValidNamespace, ns[:10] + "+" + ns[11:], false},
		{"namespace standard base64 /", ValidNamespace, ns[:10] + "/" + ns[11:], false},
		{"namespace padding", ValidNamespace, ns[:len(ns)-1] + "=", false},
		{"namespace newline", ValidNamespace, ns[:10] + "\n" + ns[11:], false},
		// 'F' sets a trailing bit that 32 bytes cannot produce.
		{"namespace non-zero trailing bits", ValidNamespace, ns[:len(ns)-1] + "F", false},
		{"namespace empty", ValidNamespace, "", false},
		{"owner example", ValidOwnerToken, own, true},
		{"owner one short", ValidOwnerToken, own[:len(own)-1], false},
		{"owner one long", ValidOwnerToken, own + "A", false},
		{"owner namespace prefix", ValidOwnerToken, "ns_" + own[4:], false},
		{"owner uppercase prefix", ValidOwnerToken, "OWN_" + own[4:], false},
		{"owner invalid alphabet", ValidOwnerToken, own[:20] + "." + own[21:], false},
		{"owner namespace value", ValidOwnerToken, ns, false},
		{"token", ValidToken, tok, true},
		{"token one short", ValidToken, tok[:63], false},
		{"token one long", ValidToken, tok + "0", false},
		{"token uppercase", ValidToken, strings.ToUpper(tok), false},
		{"token one uppercase", ValidToken, tok[:63] + "F", false},
		{"token non-hex", ValidToken, tok[:63] + "g", false},
		{"token empty", ValidToken, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.valid(tc.in); got != tc.want {
				t.Fatalf("valid(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestIDStringIsHex(t *testing.T) {
	id := ID{0xde, 0xad, 0xbe, 0xef}
	if got, want := id.String(), "deadbeef"+strings.Repeat("0", 24); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if _, err := hex.DecodeString(id.String()); err != nil {
		t.Fatalf("String() is not hex: %v", err)
	}
}
