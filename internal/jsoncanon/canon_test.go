package jsoncanon

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		// Structure and whitespace.
		{"null", "null", "null"},
		{"true", " true ", "true"},
		{"false", "\t\r\nfalse\n", "false"},
		{"empty object", "{ }", "{}"},
		{"empty array", "[ ]", "[]"},
		{"whitespace everywhere", " { \"a\" : [ 1 , 2 ] , \"b\" : { } } \n", `{"a":[1,2],"b":{}}`},
		{"keys sorted", `{"b":1,"a":2,"c":3}`, `{"a":2,"b":1,"c":3}`},
		{"keys sorted nested", `{"z":{"y":1,"x":2},"a":[{"d":1,"c":2}]}`, `{"a":[{"c":2,"d":1}],"z":{"x":2,"y":1}}`},
		{"keys byte order", `{"a":1,"B":2,"_":3,"é":4,"aa":5,"":6}`, `{"":6,"B":2,"_":3,"a":1,"aa":5,"é":4}`},
		// U+FFFF (EF BF BF) sorts before U+10000 (F0 90 80 80) in UTF-8 byte
		// order, though not in UTF-16 order.
		{"keys utf-8 order", `{"\ud800\udc00":1,"\uffff":2}`, `{"` + "\uffff" + `":2,"` + "\U00010000" + `":1}`},
		{"keys compared unescaped", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"array order kept", `[3,1,2]`, `[3,1,2]`},
		// Strings.
		{"escapes kept", `"\" \\ \n \r \t \b \f"`, `"\" \\ \n \r \t \b \f"`},
		{"slash unescaped", `"a\/b"`, `"a/b"`},
		{"control escaped lowercase", `"\u0001\u001F\u0000"`, `"\u0001\u001f\u0000"`},
		{"unicode escape decoded", `"\u00e9\u4e2d"`, `"é中"`},
		{"html raw", `"\u003c\u003e\u0026<>&"`, `"<>&<>&"`},
		{"line separators raw", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"del raw", `"\u007f"`, "\"\x7f\""},
		{"surrogate pair", `"\ud83d\ude00"`, `"😀"`},
		{"surrogate pair uppercase hex", `"\uD83D\uDE00"`, `"😀"`},
		{"raw utf-8 kept", `"héllo 世界 😀"`, `"héllo 世界 😀"`},
		{"empty string", `""`, `""`},
		// Numbers.
		{"zero", "0", "0"},
		{"minus zero", "-0", "0"},
		{"minus zero float", "-0.0", "0"},
		{"minus zero exp", "-0e5", "0"},
		{"integer kept", "-42", "-42"},
		{"one point zero", "1.0", "1"},
		{"1e0", "1e0", "1"},
		{"10e-1", "10e-1", "1"},
		{"1e2", "1e2", "100"},
		{"1E+2", "1E+2", "100"},
		{"0.1", "0.1", "0.1"},
		{"trailing zeros", "1.50", "1.5"},
		{"array of numbers", "[1.50, 2E2]", "[1.5,200]"},
		{"1e20 integral", "1e20", "100000000000000000000"},
		{"1e21", "1e21", "1e21"},
		{"1e21 as integer literal", "1000000000000000000000", "1000000000000000000000"},
		{"negative large", "-1.5E+300", "-1.5e300"},
		{"small", "0.0000001", "1e-7"},
		{"0.00001", "0.00001", "1e-5"},
		{"0.0001", "0.0001", "0.0001"},
		{"underflow to zero", "1e-400", "0"},
		{"negative underflow", "-1e-400", "0"},
		{"big integer kept", "123456789012345678901234567890", "123456789012345678901234567890"},
		{"big negative integer kept", "-123456789012345678901234567890", "-123456789012345678901234567890"},
		{"float rounding", "0.30000000000000004", "0.30000000000000004"},
		{"float shortest", "3.14159265358979323846264", "3.141592653589793"},
		{"integral float beyond 2^53", "12345678901234567890.0", "12345678901234567000"},
		{"max float", "1.7976931348623157e308", "1.7976931348623157e308"},
		{"denormal", "5e-324", "5e-324"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tc.in))
			if err != nil {
				t.Fatalf("Canonicalize(%q): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Fatalf("Canonicalize(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestCanonicalizeInvalid(t *testing.T) {
	deep := func(n int, open, close string) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	tests := []struct {
		name       string
		in         string
		wantMsg    string
		wantOffset int
		wantPath   string
	}{
		{"empty", "", "unexpected end of input", 0, "$"},
		{"only whitespace", "  \n", "unexpected end of input", 3, "$"},
		{"truncated object", `{"a":1`, "unexpected end of input", 6, "$"},
		{"truncated key", `{"a`, "unexpected end of input in string", 3, "$"},
		{"truncated after colon", `{"a":`, "unexpected end of input", 5, "$.a"},
		{"truncated array", `[1,2`, "unexpected end of input", 4, "$"},
		{"truncated string", `"abc`, "unexpected end of input in string", 4, "$"},
		{"truncated literal", `tru`, "invalid literal", 0, "$"},
		{"trailing data", `{} {}`, "unexpected data after the JSON value", 3, "$"},
		{"trailing garbage", `1 x`, "unexpected data after the JSON value", 2, "$"},
		{"trailing comma array", `[1,]`, "expected a value", 3, "$[1]"},
		{"trailing comma object", `{"a":1,}`, "expected a string key", 7, "$"},
		{"missing colon", `{"a" 1}`, "expected ':'", 5, "$"},
		{"unquoted key", `{a:1}`, "expected a string key", 1, "$"},
		{"single quotes", `'a'`, "expected a value", 0, "$"},
		{"bom", "\ufeff{}", "expected a value", 0, "$"},
		{"duplicate key", `{"a":1,"a":2}`, `duplicate object key "a"`, 7, "$.a"},
		{"duplicate key at depth", `{"x":[0,{"b":1,"c":{"k":1,"j":2,"k":3}}]}`, `duplicate object key "k"`, 32, "$.x[1].c.k"},
		{"duplicate key after unescape", `{"a":1,"\u0061":2}`, `duplicate object key "a"`, 7, "$.a"},
		{"duplicate odd key", `{"a b":1,"a b":2}`, `duplicate object key "a b"`, 9, `$["a b"]`},
		{"invalid utf-8", "\"a\xffb\"", "invalid UTF-8", 2, "$"},
		{"invalid utf-8 in key", "{\"\xc3\":1}", "invalid UTF-8", 2, "$"},
		{"overlong utf-8", "\"\xc0\xaf\"", "invalid UTF-8", 1, "$"},
		{"utf-8 surrogate", "\"\xed\xa0\x80\"", "invalid UTF-8", 1, "$"},
		{"raw control char", "\"a\nb\"", "control character 0x0a", 2, "$"},
		{"bad escape", `"\x"`, "invalid escape", 1, "$"},
		{"short unicode escape", `"\u12"`, "expected 4 hex digits", 1, "$"},
		{"lone high surrogate", `"\ud800"`, "lone high surrogate", 1, "$"},
		{"high surrogate then char", `"\ud800x"`, "lone high surrogate", 1, "$"},
		{"high surrogate then high", `"\ud800\ud800"`, "lone high surrogate", 1, "$"},
		{"lone low surrogate", `["\udc00"]`, "lone low surrogate", 2, "$[0]"},
		{"leading zero", `01`, "unexpected data after the JSON value", 1, "$"},
		{"plus sign", `+1`, "expected a value", 0, "$"},
		{"bare minus", `-`, "expected a digit", 1, "$"},
		{"dot without digits", `1.`, "after '.'", 2, "$"},
		{"leading dot", `.5`, "expected a value", 0, "$"},
		{"exponent without digits", `1e`, "in exponent", 2, "$"},
		{"exponent sign only", `1e+`, "in exponent", 3, "$"},
		{"NaN", `NaN`, "expected a value", 0, "$"},
		{"Infinity", `-Infinity`, "expected a digit", 1, "$"},
		{"out of range", `{"n":[1e400]}`, "number out of range", 6, "$.n[0]"},
		{"negative out of range", `-1.8e308`, "number out of range", 0, "$"},
		{"depth 65 arrays", deep(65, "[", "]"), "nesting deeper than 64", 64, "$" + strings.Repeat("[0]", 64)},
		{"depth 65 objects", strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), "nesting deeper than 64", 64 * 5, "$" + strings.Repeat(".a", 64)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range []func([]byte) ([]byte, error){Canonicalize, CanonicalizeRedacted} {
				out, err := f([]byte(tc.in))
				if err == nil {
					t.Fatalf("accepted %q as %q", tc.in, out)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v does not wrap ErrInvalid", err)
				}
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("error %v is not an *Error", err)
				}
				if !strings.Contains(e.Msg, tc.wantMsg) {
					t.Errorf("message %q does not contain %q", e.Msg, tc.wantMsg)
				}
				if e.Offset != tc.wantOffset {
					t.Errorf("offset %d, want %d (%v)", e.Offset, tc.wantOffset, err)
				}
				if e.Path != tc.wantPath {
					t.Errorf("path %q, want %q", e.Path, tc.wantPath)
				}
			}
		})
	}
}

func TestMaxDepthAccepted(t *testing.T) {
	tests := []struct{ name, in string }{
		{"64 arrays", strings.Repeat("[", 64) + strings.Repeat("]", 64)},
		{"64 objects", strings.Repeat(`{"a":`, 63) + "{}" + strings.Repeat("}", 63)},
		{"64 mixed", strings.Repeat(`[{"a":`, 32)[:len(strings.Repeat(`[{"a":`, 32))-5] + "1" + strings.Repeat("}]", 32)[1:]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Canonicalize([]byte(tc.in))
			if err != nil {
				t.Fatalf("depth %d rejected: %v", MaxDepth, err)
			}
			if !json.Valid(out) {
				t.Fatalf("output %q is not valid JSON", out)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	_, err := Canonicalize([]byte(`{"a":{"b":1,"b":2}}`))
	want := `invalid JSON at byte 12 ($.a.b): duplicate object key "b"`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	long := strings.Repeat("k", 1000)
	_, err = Canonicalize([]byte(`{"` + long + `":[1e999]}`))
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("error for a long key is %d bytes, want at most 200: %v", len(err.Error()), err)
	}
}

// TestInputNotModified guards against appending to slices that alias the
// input: a plain string followed by an escaped one would overwrite it.
func TestInputNotModified(t *testing.T) {
	in := []byte(`["abc","\u0041\u0042\u0043\u0044\u0045\u0046",{"k":"xy","\u006b2":"\n\n\n\n"}, "tail"]`)
	orig := bytes.Clone(in)
	for _, f := range []func([]byte) ([]byte, error){Canonicalize, CanonicalizeRedacted} {
		out, err := f(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in, orig) {
			t.Fatalf("input modified: %q", in)
		}
		if want := `["abc","ABCDEF",{"k":"xy","k2":"\n\n\n\n"},"tail"]`; string(out) != want {
			t.Fatalf("got %q, want %q", out, want)
		}
	}
}

// corpus is shared by the idempotence, equivalence and fuzz tests.
var corpus = []string{
	`null`, `true`, `0`, `-0`, `1.0`, `1e400`, `-1e-400`, `1e21`, `123456789012345678901234567890`,
	`[1.50, 2E2, 0.1, 1e-7, 5e-324, 1.7976931348623157e308]`,
	`{"b":1,"a":{"d":[true,false,null],"c":"x"}}`,
	`{"\u00e9":"\u2028\ud83d\ude00","e":"\"\\\/\b\f\n\r\t\u0000"}`,
	`{"password":"hunter2","nested":[{"Api-Key":{"a":1}},{"token_count":3}],"author":"ann"}`,
	`{"a":1,"a":2}`, `"\ud800"`, "\"\xff\"", `[1,]`, `{"a" 1}`,
	`{"report_id":42,"items":[{"sku":"A-1","qty":2,"price":9.99},{"sku":"B-2","qty":1,"price":1e2}]}`,
	" \n[ {} , [ ] , \"\" ] \t",
}

func TestIdempotent(t *testing.T) {
	for _, in := range corpus {
		for name, f := range map[string]func([]byte) ([]byte, error){"Canonicalize": Canonicalize, "CanonicalizeRedacted": CanonicalizeRedacted} {
			once, err := f([]byte(in))
			if err != nil {
				continue
			}
			twice, err := f(once)
			if err != nil {
				t.Fatalf("%s rejects its own output %q: %v", name, once, err)
			}
			if !bytes.Equal(once, twice) {
				t.Fatalf("%s not idempotent on %q: %q then %q", name, in, once, twice)
			}
		}
	}
}

// TestAgreesWithEncodingJSON checks that canonicalisation preserves meaning
// as encoding/json sees it.
func TestAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range corpus {
		out, err := Canonicalize([]byte(in))
		if err != nil {
			continue
		}
		checkSameValue(t, []byte(in), out)
	}
}

func checkSameValue(t *testing.T, in, out []byte) {
	t.Helper()
	if !json.Valid(in) {
		t.Fatalf("accepted %q, which encoding/json rejects", in)
	}
	if !json.Valid(out) {
		t.Fatalf("output %q of %q is not valid JSON", out, in)
	}
	var a, b any
	if err := json.Unmarshal(in, &a); err != nil {
		return // e.g. an integer literal beyond float64: nothing to compare
	}
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("encoding/json cannot read output %q: %v", out, err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("value changed: %q (%#v) became %q (%#v)", in, a, out, b)
	}
}

func TestCanonicalizeRedacted(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"top-level member", `{"password":"hunter2","user":"ann"}`, `{"password":"[redacted]","user":"ann"}`},
		{"object value", `{"Authorization":{"scheme":"Bearer","v":"abc"}}`, `{"Authorization":"[redacted]"}`},
		{"array value", `{"tokens":["a","b"]}`, `{"tokens":"[redacted]"}`},
		{"null and number values", `{"secret":null,"api_key":12}`, `{"api_key":"[redacted]","secret":"[redacted]"}`},
		{"inside arrays", `[{"x":[{"client_secret":"s","id":1}]}]`, `[{"x":[{"client_secret":"[redacted]","id":1}]}]`},
		{"deep in objects", `{"a":{"b":{"c":{"X-Api-Key":"k","d":1}}}}`, `{"a":{"b":{"c":{"X-Api-Key":"[redacted]","d":1}}}}`},
		{"redacted key sorted", `{"z":1,"access_token":"t","a":2}`, `{"a":2,"access_token":"[redacted]","z":1}`},
		{"escaped key name", `{"pass\u0077ord":"x"}`, `{"password":"[redacted]"}`},
		{"secret inside ordinary value kept", `{"note":"password=hunter2"}`, `{"note":"password=hunter2"}`},
		{"non-secret names kept", `{"author":"a","keys":[1],"monkey":2}`, `{"author":"a","keys":[1],"monkey":2}`},
		{"scalars untouched", `"password"`, `"password"`},
		{"already redacted", `{"token":"[redacted]"}`, `{"token":"[redacted]"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CanonicalizeRedacted([]byte(tc.in))
			if err != nil {
				t.Fatalf("CanonicalizeRedacted(%q): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Fatalf("CanonicalizeRedacted(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedactedValueStillValidated(t *testing.T) {
	for _, in := range []string{`{"password":{"a":1,"a":2}}`, `{"token":[1e400]}`, "{\"secret\":\"\xff\"}", `{"secret":[1,]}`} {
		if out, err := CanonicalizeRedacted([]byte(in)); err == nil {
			t.Errorf("CanonicalizeRedacted(%q) = %q, want an error", in, out)
		}
	}
}

func TestSecretLikeName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"authorization", true},
		{"Authorization", true},
		{"proxy-authorization", true},
		{"password", true},
		{"PassWord", true},
		{"db_passwd", true},
		{"secret", true},
		{"client_secret", true},
		{"token", true},
		{"access_token", true},
		{"refreshToken", true},
		{"tokenizer", true},
		{"private_key", true},
		{"PRIVATE-KEY", true},
		{"private.key", true},
		{"Private Key", true},
		{"privateKey", true},
		{"api_key", true},
		{"apiKey", true},
		{"X-Api-Key", true},
		{"API.KEY", true},
		{"api-Key", true},
		{"private\u212aey", true}, // KELVIN SIGN lower-cases to 'k'
		{"author", false},
		{"keys", false},
		{"key", false},
		{"api", false},
		{"private", false},
		{"pass", false},
		{"tok_en", true}, // separators are removed before matching
		{"toke", false},
		{"secre", false},
		{"apikee", false},
		{"api/key", false},
		{"", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := SecretLikeName(tc.name); got != tc.want {
				t.Fatalf("SecretLikeName(%q) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
