package service

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCheckTextRefusesEveryControlCharacter runs every Unicode scalar
// value through the namespaced key and fingerprint rule, alone and between
// other text: C0, DEL and C1 are refused, everything else is allowed.
func TestCheckTextRefusesEveryControlCharacter(t *testing.T) {
	control := func(r rune) bool { return r <= 0x1f || (r >= 0x7f && r <= 0x9f) }
	refused := 0
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		for _, v := range []string{string(r), "invoice:" + string(r) + ":2026"} {
			bad := checkText("key", v)
			switch {
			case control(r) && bad == nil:
				t.Errorf("U+%04X in %q accepted", r, v)
			case control(r) && (bad.Kind != KindInvalid || bad.Field != "key" ||
				!strings.Contains(bad.Message, "must not contain control characters")):
				t.Errorf("U+%04X: got %+v", r, *bad)
			case !control(r) && bad != nil:
				t.Errorf("U+%04X in %q refused: %v", r, v, bad)
			}
		}
		if control(r) {
			refused++
		}
	}
	if refused != 32+1+32 {
		t.Fatalf("%d control characters checked, want 65", refused)
	}
}

// TestLeaseIdentityRefusesC1 checks the rule where it is applied: a C1
// character, here NEXT LINE (U+0085), in a namespaced key or in a
// fingerprint is a 400 naming the field, and the message names the rule,
// not the value.
func TestLeaseIdentityRefusesC1(t *testing.T) {
	ns := "ns_" + strings.Repeat("A", 43)
	text := "invoice:\u0085:S3CRET"
	for _, c := range []struct {
		field     string
		namespace *string
		key, fp   *string
	}{
		{field: "key", namespace: &ns, key: &text},
		{field: "fingerprint", namespace: &ns, key: new("invoice:1"), fp: &text},
		{field: "fingerprint", key: new("q7Rk2VbN9xLm4TcW8eHj1ZpS6uYd3FgA0oKi5nBvXrE"), fp: &text},
	} {
		_, _, bad := leaseIdentity(c.namespace, c.key, c.fp)
		if bad == nil {
			t.Errorf("%s with U+0085 accepted", c.field)
			continue
		}
		msg := bad.Message
		if bad.Kind != KindInvalid || bad.Field != c.field || !strings.Contains(msg, "must not contain control characters") || strings.Contains(msg, "S3CRET") {
			t.Errorf("%s with U+0085: got %+v", c.field, bad)
		}
	}
}
