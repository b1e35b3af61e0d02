package jsoncanon

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func FuzzCanonicalize(f *testing.F) {
	for _, s := range corpus {
		f.Add([]byte(s))
	}
	f.Add([]byte(benchPayload))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonicalize(in)
		red, rerr := CanonicalizeRedacted(in)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("Canonicalize err %v but CanonicalizeRedacted err %v", err, rerr)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !errors.Is(rerr, ErrInvalid) {
				t.Fatalf("errors do not wrap ErrInvalid: %v / %v", err, rerr)
			}
			return
		}
		checkSameValue(t, in, out)
		if !json.Valid(red) {
			t.Fatalf("redacted output %q is not valid JSON", red)
		}
		for _, c := range []struct {
			f    func([]byte) ([]byte, error)
			once []byte
		}{{Canonicalize, out}, {CanonicalizeRedacted, red}} {
			twice, err := c.f(c.once)
			if err != nil {
				t.Fatalf("own output %q rejected: %v", c.once, err)
			}
			if !bytes.Equal(twice, c.once) {
				t.Fatalf("not idempotent: %q became %q", c.once, twice)
			}
		}
		// Redacting canonical output gives the same as redacting the input.
		again, err := CanonicalizeRedacted(out)
		if err != nil || !bytes.Equal(again, red) {
			t.Fatalf("redacting canonical %q gave %q (%v), want %q", out, again, err, red)
		}
	})
}
