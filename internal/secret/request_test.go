package secret

import (
	"strings"
	"testing"
)

func TestValidRequestID(t *testing.T) {
	for _, ok := range []string{
		strings.Repeat("a", 32), strings.Repeat("Z", 128), "0b7c6a8e-3f2d-4c1b-9a8e-7d6c5b4a3f2e", "job_42-" + strings.Repeat("x", 25),
	} {
		if !ValidRequestID(ok) {
			t.Errorf("ValidRequestID(%q) = false", ok)
		}
	}
	for _, bad := range []string{
		"", strings.Repeat("a", 31), strings.Repeat("a", 129), strings.Repeat("a", 31) + " ", strings.Repeat("a", 31) + ".",
		strings.Repeat("a", 31) + "é", strings.Repeat("a", 31) + "\x00",
	} {
		if ValidRequestID(bad) {
			t.Errorf("ValidRequestID(%q) = true", bad)
		}
	}
}

func TestDerivedTokensHaveTheirFormAndDependOnEveryInput(t *testing.T) {
	l1, l2 := LeaseID("", strings.Repeat("k", 40)), LeaseID("", strings.Repeat("j", 40))
	r1, r2 := strings.Repeat("a", 32), strings.Repeat("b", 32)
	o := OwnerTokenOfRequest(l1, r1)
	if !ValidOwnerToken(o) || o != OwnerTokenOfRequest(l1, r1) {
		t.Fatalf("owner token %q: not the owner-token form, or not deterministic", o)
	}
	if o == OwnerTokenOfRequest(l2, r1) || o == OwnerTokenOfRequest(l1, r2) {
		t.Fatal("the owner token does not depend on both the lease and the request id")
	}
	var q1, q2 ID
	q1[0], q2[0] = 1, 2
	rc := ReceiptOfRequest(q1, r1)
	if !ValidToken(rc) || rc != ReceiptOfRequest(q1, r1) {
		t.Fatalf("receipt %q: not the receipt form, or not deterministic", rc)
	}
	if rc == ReceiptOfRequest(q2, r1) || rc == ReceiptOfRequest(q1, r2) {
		t.Fatal("the receipt does not depend on both the queue and the request id")
	}
	if strings.Contains(o, r1) || strings.Contains(rc, r1) {
		t.Fatal("a derived token contains the request id")
	}
}
