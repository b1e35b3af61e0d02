package jsonenc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/holdfast/holdfast/internal/jsoncanon"
)

// H is a JSON object: the body of an answer.
type H map[string]any

// Stored is JSON the state machine stored canonicalised (a payload, a
// result): it is written as it is, without being checked again.
type Stored []byte

// MarshalJSON returns the stored JSON, or null.
func (s Stored) MarshalJSON() ([]byte, error) {
	if s == nil {
		return []byte("null"), nil
	}
	return s, nil
}

// Encode encodes v without HTML escaping, so stored JSON (payloads,
// results) comes back byte for byte as it was canonicalised.
func Encode(v any) ([]byte, error) {
	if h, ok := v.(H); ok {
		if b, ok := appendH(make([]byte, 0, 512), h); ok {
			return b, nil
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// EncodeUnion encodes the members of x and y as one object, as Encode
// would encode a map holding both; a name in both takes y's value.
func EncodeUnion(x, y H) ([]byte, error) {
	if b, ok := appendUnion(make([]byte, 0, 512), x, y); ok {
		return b, nil
	}
	m := make(H, len(x)+len(y))
	for k, v := range x {
		m[k] = v
	}
	for k, v := range y {
		m[k] = v
	}
	return Encode(m)
}

// appendH appends h as a JSON object with sorted keys; ok is false when a
// value has a type it does not know.
func appendH(b []byte, h H) ([]byte, bool) { return appendUnion(b, h, nil) }

// appendUnion appends the members of x and y as one JSON object with
// sorted keys, y's value for a name in both; ok is false when a value has a
// type it does not know.
func appendUnion(b []byte, x, y H) ([]byte, bool) {
	var small [16]string
	keys := small[:0]
	for k := range x {
		if _, dup := y[k]; !dup {
			keys = append(keys, k)
		}
	}
	for k := range y {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, k)
		b = append(b, ':')
		v, inY := y[k]
		if !inY {
			v = x[k]
		}
		var ok bool
		if b, ok = appendValue(b, v); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendValue(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return AppendString(b, x), true
	case bool:
		return strconv.AppendBool(b, x), true
	case int:
		return strconv.AppendInt(b, int64(x), 10), true
	case int64:
		return strconv.AppendInt(b, x, 10), true
	case uint64:
		return strconv.AppendUint(b, x, 10), true
	case Stored:
		if x == nil {
			return append(b, "null"...), true
		}
		return append(b, x...), true
	case json.RawMessage:
		if x == nil {
			return append(b, "null"...), true
		}
		// Stored JSON is canonical and compact already; anything else goes
		// through encoding/json, which compacts and checks it.
		if !json.Valid(x) || bytes.ContainsAny(x, " \t\r\n") {
			return b, false
		}
		return append(b, x...), true
	case H:
		if x == nil {
			return append(b, "null"...), true
		}
		return appendH(b, x)
	}
	return b, false
}

const hexDigits = "0123456789abcdef"

// AppendString appends s quoted as encoding/json does with HTML escaping
// off: \", \\, \n, \r, \t, \b, \f, other control characters and
// U+2028/U+2029 as \u escapes, invalid UTF-8 as U+FFFD.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = jsoncanon.AppendEscapedASCII(append(b, s[start:i]...), c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
