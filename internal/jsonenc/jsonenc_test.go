package jsonenc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// stdEncode is what Encode must match: encoding/json without HTML
// escaping, no trailing newline.
func stdEncode(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestEncodeMatchesEncodingJSON(t *testing.T) {
	cases := []any{
		H{},
		H{"ok": true, "b": false, "n": nil, "i": -42, "i64": int64(1) << 62, "u": uint64(1) << 63},
		H{"s": "plain", "esc": "q\" b\\ n\n r\r t\t bs\b ff\f nul\x00 x1f\x1f del\x7f <>&", "u": "é ü 中 \u2028\u2029 😀", "bad": "a\xffb\xc0"},
		H{"raw": json.RawMessage(`{"a":[1,2,{"b":null}]}`), "null": json.RawMessage(nil), "spaced": json.RawMessage(`{ "a" : 1 }`)},
		H{"nested": H{"z": 1, "a": H{"m": "x"}}, "job": nil},
		H{"stored": Stored(`{"k":"v"}`), "none": Stored(nil)},
		H{"other": []int{1, 2}, "f": 1.5},
	}
	for i, v := range cases {
		got, err := Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := stdEncode(t, v); !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func FuzzEncodeString(f *testing.F) {
	for _, s := range []string{"", "abc", "\x00\x1f\"\\", "\u2028é\xff", "<script>&"} {
		f.Add(s, int64(7))
	}
	f.Fuzz(func(t *testing.T, s string, n int64) {
		v := H{s: s, "n": n, "k" + s: H{"v": s}}
		got, err := Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if want := stdEncode(t, v); !bytes.Equal(got, want) {
			t.Fatalf("got %s want %s", got, want)
		}
	})
}
