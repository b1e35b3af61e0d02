package jsoncanon

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects accepted: the
// top-level array or object is depth 1.
const MaxDepth = 64

// ErrInvalid is wrapped by every error this package returns: the input is
// not JSON, or is JSON that holdfast does not accept.
var ErrInvalid = errors.New("invalid JSON")

// redactedValue replaces the value of every secret-like object member.
const redactedValue = `"[redacted]"`

// Error describes why input was rejected and where. It wraps ErrInvalid.
type Error struct {
	// Offset is the byte offset in the input at which the problem was found.
	Offset int
	// Path locates the value being parsed, such as $.payload.items[2]; "$"
	// is the whole document.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error returns a message naming the problem, the byte offset and the path.
func (e *Error) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d (%s): %s", e.Offset, e.Path, e.Msg)
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// Canonicalize parses exactly one JSON value (surrounding whitespace
// allowed, nothing else after it) and returns its canonical encoding:
//
//   - no insignificant whitespace;
//   - object members sorted by the bytes of their UTF-8 keys;
//   - strings written with only '"', '\\' and control characters below
//     0x20 escaped (as \b \t \n \f \r, else \u00xx with lowercase hex);
//     everything else, including '/', '<', '>', '&', U+2028 and all
//     non-ASCII, written raw as UTF-8;
//   - an integer literal (no fraction, no exponent) written with its digits
//     as given, except that "-0" becomes "0", so integers of any size keep
//     their exact value;
//   - any other number converted to the nearest float64 and written as an
//     integer without exponent or fraction when it is integral and its
//     magnitude is below 1e21 (1.0, 1e0 and 10e-1 all become 1; -0.0
//     becomes 0), otherwise in the shortest form that round-trips, with a
//     lowercase 'e', no '+' and no leading zeros in the exponent (1.5,
//     1e21, 1e-7, -2.5e-300).
//
// It rejects invalid UTF-8, escapes that encode a lone UTF-16 surrogate,
// duplicate object keys (compared after unescaping), nesting deeper than
// MaxDepth and non-integer numbers beyond the float64 range (1e400). Every
// error is an *Error wrapping ErrInvalid.
func Canonicalize(raw []byte) ([]byte, error) {
	return canonicalize(raw, false)
}

// CanonicalizeRedacted is Canonicalize, except that at any depth the value
// of every object member whose name is secret-like (see SecretLikeName) is
// replaced, whatever it is, by the string "[redacted]". The replaced value
// must still be valid: redaction never makes invalid input acceptable.
func CanonicalizeRedacted(raw []byte) ([]byte, error) {
	return canonicalize(raw, true)
}

// SecretLikeName reports whether an object member with this name holds a
// secret and must be redacted: after Unicode lower-casing and removing
// '-', '_', '.' and ' ', the name contains "authorization", "password",
// "passwd", "secret", "token", "privatekey" or "apikey". So
// "Authorization", "access_token", "client_secret", "apiKey", "X-Api-Key"
// and "PRIVATE-KEY" are secret-like, and "author" and "keys" are not. It
// errs towards redacting: "tokenizer" is secret-like too.
func SecretLikeName(name string) bool {
	parts := [...]string{"authorization", "password", "passwd", "secret", "token", "privatekey", "apikey"}
	var buf [64]byte
	folded := buf[:0]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= utf8.RuneSelf {
			// Unicode lower-casing can turn non-ASCII into ASCII (KELVIN
			// SIGN into 'k'), so take the slow path for all of the name.
			folded = []byte(strings.Map(dropSeparator, strings.ToLower(name)))
			break
		}
		if dropSeparator(rune(c)) < 0 {
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		folded = append(folded, c)
	}
	for _, part := range parts {
		if bytes.Contains(folded, []byte(part)) {
			return true
		}
	}
	return false
}

func dropSeparator(r rune) rune {
	switch r {
	case '-', '_', '.', ' ':
		return -1
	}
	return r
}

func canonicalize(raw []byte, redact bool) ([]byte, error) {
	p := parser{in: raw, redact: redact}
	p.skipSpace()
	out, err := p.value(make([]byte, 0, len(raw)))
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.in) {
		return nil, p.fail(p.pos, "unexpected data after the JSON value")
	}
	return out, nil
}

// pathSegment is one step of the path to the value being parsed: an object
// key, or an array index when key is nil.
type pathSegment struct {
	key   []byte
	index int
}

type parser struct {
	in     []byte
	pos    int
	depth  int
	redact bool
	path   []pathSegment
	// scratch holds unescaped string values between decoding and encoding;
	// keys are not decoded into it because they must outlive the next
	// string.
	scratch []byte
	// members is a stack shared by the objects being parsed: each object
	// owns members[base:] while it is open.
	members []member
	// keys holds the unescaped keys of members, so that member holds no
	// pointers and sorting it needs no write barriers.
	keys []byte
	// reorder holds an object's encoded members while they are rewritten
	// in sorted order.
	reorder []byte
}

// member is one encoded object member in the output buffer.
type member struct {
	keyStart, keyEnd int // span of the unescaped key in parser.keys
	start, end       int // span of `"key":value` in the output
	offset           int // byte offset of the key in the input
}

func (p *parser) fail(offset int, format string, args ...any) error {
	return &Error{Offset: offset, Path: p.pathString(), Msg: fmt.Sprintf(format, args...)}
}

// pathString renders the current path. Long keys are cut so that a hostile
// document cannot make error messages huge.
func (p *parser) pathString() string {
	var b strings.Builder
	b.WriteByte('$')
	for _, s := range p.path {
		if s.key == nil {
			fmt.Fprintf(&b, "[%d]", s.index)
			continue
		}
		k := string(s.key)
		if len(k) > 64 {
			k = k[:64] + "..."
		}
		if isIdentifier(k) {
			b.WriteByte('.')
			b.WriteString(k)
		} else {
			b.WriteByte('[')
			b.WriteString(strconv.Quote(k))
			b.WriteByte(']')
		}
	}
	return b.String()
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

func (p *parser) skipSpace() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(dst []byte) ([]byte, error) {
	if p.pos >= len(p.in) {
		return nil, p.fail(p.pos, "unexpected end of input, expected a value")
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(dst)
	case c == '[':
		return p.array(dst)
	case c == '"':
		s, copied, err := p.str(p.scratch[:0])
		if err != nil {
			return nil, err
		}
		if copied {
			p.scratch = s // never keep an alias of the input: it would be appended to
		}
		return appendString(dst, s), nil
	case c == '-' || '0' <= c && c <= '9':
		return p.number(dst)
	case c == 't':
		return p.literal(dst, "true")
	case c == 'f':
		return p.literal(dst, "false")
	case c == 'n':
		return p.literal(dst, "null")
	default:
		return nil, p.fail(p.pos, "unexpected character %s, expected a value", quoteByte(c))
	}
}

func quoteByte(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (p *parser) literal(dst []byte, lit string) ([]byte, error) {
	if !bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		return nil, p.fail(p.pos, "invalid literal, expected %s", lit)
	}
	p.pos += len(lit)
	return append(dst, lit...), nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.fail(p.pos, "nesting deeper than %d", MaxDepth)
	}
	return nil
}

func (p *parser) array(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '['
	dst = append(dst, '[')
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		p.depth--
		return append(dst, ']'), nil
	}
	for i := 0; ; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		p.path = append(p.path, pathSegment{index: i})
		var err error
		if dst, err = p.value(dst); err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		p.skipSpace()
		if p.pos >= len(p.in) {
			return nil, p.fail(p.pos, "unexpected end of input, expected ',' or ']'")
		}
		c := p.in[p.pos]
		p.pos++
		if c == ']' {
			break
		}
		if c != ',' {
			return nil, p.fail(p.pos-1, "unexpected character %s, expected ',' or ']'", quoteByte(c))
		}
		p.skipSpace()
	}
	p.depth--
	return append(dst, ']'), nil
}

func (p *parser) object(dst []byte) ([]byte, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '{'
	dst = append(dst, '{')
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		p.depth--
		return append(dst, '}'), nil
	}
	body := len(dst)
	base := len(p.members)
	keyBase := len(p.keys)
	sorted := true
	for {
		if p.pos >= len(p.in) {
			return nil, p.fail(p.pos, "unexpected end of input, expected a string key")
		}
		if p.in[p.pos] != '"' {
			return nil, p.fail(p.pos, "unexpected character %s, expected a string key", quoteByte(p.in[p.pos]))
		}
		keyOffset := p.pos
		key, _, err := p.str(nil)
		if err != nil {
			return nil, err
		}
		if key == nil {
			key = []byte{} // nil marks an array index in the path
		}
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return nil, p.fail(p.pos, "expected ':' after object key")
		}
		p.pos++
		p.skipSpace()

		if len(p.members) > base {
			dst = append(dst, ',')
		}
		start := len(dst)
		dst = appendString(dst, key)
		dst = append(dst, ':')
		valueStart := len(dst)
		p.path = append(p.path, pathSegment{key: key})
		if dst, err = p.value(dst); err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		if p.redact && SecretLikeName(string(key)) {
			dst = append(dst[:valueStart], redactedValue...)
		}
		if n := len(p.members); n > base && bytes.Compare(p.keys[p.members[n-1].keyStart:p.members[n-1].keyEnd], key) >= 0 {
			sorted = false
		}
		keyStart := len(p.keys)
		p.keys = append(p.keys, key...)
		p.members = append(p.members, member{keyStart: keyStart, keyEnd: len(p.keys), start: start, end: len(dst), offset: keyOffset})

		p.skipSpace()
		if p.pos >= len(p.in) {
			return nil, p.fail(p.pos, "unexpected end of input, expected ',' or '}'")
		}
		c := p.in[p.pos]
		p.pos++
		if c == '}' {
			break
		}
		if c != ',' {
			return nil, p.fail(p.pos-1, "unexpected character %s, expected ',' or '}'", quoteByte(c))
		}
		p.skipSpace()
	}
	p.depth--
	members := p.members[base:]
	keys := p.keys
	p.members = p.members[:base]
	p.keys = p.keys[:keyBase]
	if sorted {
		return append(dst, '}'), nil
	}
	key := func(m member) []byte { return keys[m.keyStart:m.keyEnd] }
	slices.SortFunc(members, func(a, b member) int {
		if c := bytes.Compare(key(a), key(b)); c != 0 {
			return c
		}
		return a.offset - b.offset
	})
	for i := 1; i < len(members); i++ {
		if k := key(members[i]); bytes.Equal(key(members[i-1]), k) {
			p.path = append(p.path, pathSegment{key: k})
			return nil, p.fail(members[i].offset, "duplicate object key %s", strconv.Quote(string(k)))
		}
	}
	p.reorder = append(p.reorder[:0], dst[body:]...)
	dst = dst[:body]
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, p.reorder[m.start-body:m.end-body]...)
	}
	return append(dst, '}'), nil
}

// str decodes the string starting at p.pos (a '"') and appends its bytes
// to buf. When the string is plain ASCII without escapes and buf is empty it
// returns a subslice of the input instead of copying, and copied is false:
// the caller must then never append to the result.
func (p *parser) str(buf []byte) (s []byte, copied bool, err error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: plain ASCII with no escapes.
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		if c == '"' {
			plain := p.in[start:p.pos]
			p.pos++
			if len(buf) == 0 {
				return plain, false, nil
			}
			return append(buf, plain...), true, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		p.pos++
	}
	buf = append(buf, p.in[start:p.pos]...)
	for {
		if p.pos >= len(p.in) {
			return nil, false, p.fail(p.pos, "unexpected end of input in string")
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return buf, true, nil
		case c == '\\':
			if buf, err = p.escape(buf); err != nil {
				return nil, false, err
			}
		case c < 0x20:
			return nil, false, p.fail(p.pos, "control character 0x%02x in string must be escaped", c)
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return nil, false, p.fail(p.pos, "invalid UTF-8 in string")
			}
			buf = append(buf, p.in[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// escape decodes the escape sequence at p.pos (a '\\') into buf.
func (p *parser) escape(buf []byte) ([]byte, error) {
	at := p.pos
	if p.pos+1 >= len(p.in) {
		return nil, p.fail(at, "unexpected end of input in string escape")
	}
	c := p.in[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		return append(buf, c), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
	default:
		return nil, p.fail(at, "invalid escape %s in string", quoteByte(c))
	}
	r, ok := p.hex4()
	if !ok {
		return nil, p.fail(at, "invalid \\u escape, expected 4 hex digits")
	}
	switch {
	case 0xdc00 <= r && r <= 0xdfff:
		return nil, p.fail(at, "lone low surrogate \\u%04x in string", r)
	case 0xd800 <= r && r <= 0xdbff:
		if p.pos+1 >= len(p.in) || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' {
			return nil, p.fail(at, "lone high surrogate \\u%04x in string", r)
		}
		p.pos += 2
		lo, ok := p.hex4()
		if !ok {
			return nil, p.fail(p.pos-2, "invalid \\u escape, expected 4 hex digits")
		}
		if lo < 0xdc00 || lo > 0xdfff {
			return nil, p.fail(at, "lone high surrogate \\u%04x in string", r)
		}
		r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
	}
	return utf8.AppendRune(buf, r), nil
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.in) {
		return 0, false
	}
	var r rune
	for _, c := range p.in[p.pos : p.pos+4] {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	p.pos += 4
	return r, true
}

// appendString appends s, which is valid UTF-8, as a canonical JSON string.
func appendString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = AppendEscapedASCII(append(dst, s[start:i]...), c)
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendEscapedASCII appends the JSON escape of c, which is '"', '\\' or a
// control character below 0x20: the two-character form where JSON has one,
// else \u00XX. Canonical and encoding/json output agree on these.
func AppendEscapedASCII(dst []byte, c byte) []byte {
	const hexDigits = "0123456789abcdef"
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}

// number validates the JSON number at p.pos and appends its canonical form.
func (p *parser) number(dst []byte) ([]byte, error) {
	start := p.pos
	in := p.in
	i := p.pos
	if in[i] == '-' {
		i++
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case i < len(in) && '1' <= in[i] && in[i] <= '9':
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
	default:
		return nil, p.fail(i, "invalid number, expected a digit")
	}
	integer := true
	if i < len(in) && in[i] == '.' {
		integer = false
		i++
		if i >= len(in) || in[i] < '0' || in[i] > '9' {
			return nil, p.fail(i, "invalid number, expected a digit after '.'")
		}
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		integer = false
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if i >= len(in) || in[i] < '0' || in[i] > '9' {
			return nil, p.fail(i, "invalid number, expected a digit in exponent")
		}
		for i < len(in) && '0' <= in[i] && in[i] <= '9' {
			i++
		}
	}
	p.pos = i
	lit := in[start:i]
	if integer {
		if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
			return append(dst, '0'), nil
		}
		return append(dst, lit...), nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		// The grammar was checked above, so only a range error is possible;
		// underflow rounds to zero without an error.
		return nil, p.fail(start, "number out of range")
	}
	return appendFloat(dst, f), nil
}

// appendFloat writes f in the canonical form described on Canonicalize.
func appendFloat(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also -0
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'g', -1, 64)
	e := bytes.IndexByte(dst[start:], 'e')
	if e < 0 {
		return dst
	}
	// Rewrite the exponent: drop '+' and leading zeros ("1e+07" → "1e7").
	e += start + 1
	exp := dst[e:]
	neg := exp[0] == '-'
	digits := bytes.TrimLeft(exp[1:], "0") // 'g' always writes a sign
	out := dst[:e]
	if neg {
		out = append(out, '-')
	}
	return append(out, digits...)
}
