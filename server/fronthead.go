package server

import (
	"bytes"
)

// parseHead parses the request head at the start of buf. It returns nil
// and no error while the head is incomplete, errHandOff for a request the
// front does not serve, and otherwise the request with its head's and
// body's lengths.
func (f *Front) parseHead(buf []byte, req *frontRequest) (*frontRequest, error) {
	line, rest, ok := cutLine(buf)
	if !ok {
		return nil, incomplete(buf)
	}
	const method, version = "POST ", " HTTP/1.1"
	if len(line) <= len(method)+len(version) || !bytes.HasPrefix(line, []byte(method)) || !bytes.HasSuffix(line, []byte(version)) {
		return nil, errHandOff
	}
	*req = frontRequest{}
	if !f.route(line[len(method):len(line)-len(version)], req) {
		return nil, errHandOff
	}
	var hosts, lengths int
	var seen uint8
	length := -1
	for {
		var h []byte
		h, rest, ok = cutLine(rest)
		if !ok {
			return nil, incomplete(rest)
		}
		if len(h) == 0 {
			break
		}
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return nil, errHandOff
		}
		name, value := h[:colon], trimOWS(h[colon+1:])
		if !isToken(name) || !isFieldValue(value) {
			return nil, errHandOff
		}
		switch {
		case fold(name, "content-length"):
			lengths++
			length = parseLength(value)
		case fold(name, "host"):
			hosts++
			if !isHost(value) {
				return nil, errHandOff
			}
		case fold(name, "content-type"):
			req.ctype = jsonType // the common value, without a copy
			if !setOnce(&seen, seenType, &req.ctype, value) {
				return nil, errHandOff
			}
		case fold(name, "authorization"):
			if !setOnce(&seen, seenAuth, &req.auth, value) {
				return nil, errHandOff
			}
		case fold(name, "x-holdfast-timeout"):
			if !setOnce(&seen, seenTimeout, &req.timeout, value) {
				return nil, errHandOff
			}
			req.hasTO = true
		case fold(name, "connection"):
			switch {
			case fold(value, "close"):
				req.close = true
			case fold(value, "keep-alive"):
			default:
				return nil, errHandOff
			}
		case fold(name, "transfer-encoding"), fold(name, "expect"), fold(name, "upgrade"), fold(name, "te"),
			fold(name, "trailer"), fold(name, "x-holdfast-forwarded-by"), fold(name, "x-holdfast-client-ip"), fold(name, "x-holdfast-cluster-key"):
			return nil, errHandOff
		}
	}
	if hosts != 1 || lengths != 1 || length < 0 || length > frontBodyLimit {
		return nil, errHandOff
	}
	req.head = len(buf) - len(rest)
	req.bodyLen = length
	return req, nil
}

// incomplete is parseHead's verdict on a head without its end: wait for
// more, unless what is there already has a line that does not end in CRLF
// (net/http's to judge).
func incomplete(b []byte) error {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return errHandOff
	}
	return nil
}

// cutLine cuts the first CRLF-terminated line of b. A line ending in a bare
// LF, or holding a CR elsewhere, is not one (ok is false and the caller's
// incomplete check hands it over).
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, b, false
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, b, false
	}
	return line, b[i+1:], true
}

// route matches a request target against the API routes the front serves.
func (f *Front) route(target []byte, req *frontRequest) bool {
	const prefix = APIPrefix + "/"
	if !bytes.HasPrefix(target, []byte(prefix)) {
		return false
	}
	for _, c := range target {
		if !isPathByte(c) {
			return false
		}
	}
	var segs [5][]byte
	n := 0
	for rest := target[len(prefix):]; ; n++ {
		if n == len(segs) {
			return false
		}
		seg, after, more := bytes.Cut(rest, []byte("/"))
		if len(seg) == 0 || string(seg) == "." || string(seg) == ".." {
			return false
		}
		segs[n] = seg
		if !more {
			n++
			break
		}
		rest = after
	}
	is := func(i int, v string) bool { return string(segs[i]) == v }
	var tmpl string
	switch {
	case n == 1 && is(0, "lease"):
		tmpl = "/lease"
	case n == 2 && is(0, "lease") && !is(1, "namespace"):
		tmpl = "/lease/" + string(segs[1])
	case n == 1 && is(0, "queue"):
		tmpl = "/queue"
	case n == 3 && is(0, "queue") && (is(2, "jobs") || is(2, "claim")):
		tmpl = "/queue/:queue_id/" + string(segs[2])
		req.params[0] = string(segs[1])
	case n == 5 && is(0, "queue") && is(2, "jobs"):
		tmpl = "/queue/:queue_id/jobs/:job_id/:action"
		if is(4, "retry") {
			tmpl = "/queue/:queue_id/jobs/:job_id/retry"
		}
		req.params = [3]string{string(segs[1]), string(segs[3]), string(segs[4])}
	default:
		return false
	}
	for _, r := range f.routes {
		if r.path == tmpl {
			req.route = r
			return true
		}
	}
	return false
}

// isPathByte reports whether c may appear in a path the front serves:
// unreserved characters, sub-delimiters, ':', '@' and '/'. A '%', '?' or
// '#' sends the request to net/http.
func isPathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=', ':', '@', '/':
		return true
	}
	return false
}

// isToken reports whether b is an HTTP token (a header name).
func isToken(b []byte) bool {
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' || c == '+' ||
			c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return len(b) > 0
}

// isFieldValue reports whether b holds only visible ASCII, spaces and
// tabs (anything else, obsolete text included, goes to net/http).
func isFieldValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// isHost reports whether a Host value is a plain host[:port].
func isHost(b []byte) bool {
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '.' || c == '_' || c == ':' || c == '[' || c == ']':
		default:
			return false
		}
	}
	return len(b) > 0
}

// trimOWS trims the optional white space around a header value.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// fold reports whether b equals the lower-case ASCII s, ignoring case.
func fold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// parseLength parses a Content-Length of digits only (-1 otherwise).
func parseLength(b []byte) int {
	if len(b) == 0 || len(b) > 9 {
		return -1
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// jsonType is the Content-Type most clients send.
const jsonType = "application/json"

// Headers the front reads, each at most once.
const (
	seenType uint8 = 1 << iota
	seenAuth
	seenTimeout
)

// setOnce sets *dst to v unless the header was seen already (a repeated
// header goes to net/http).
func setOnce(seen *uint8, bit uint8, dst *string, v []byte) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	if string(v) != *dst { // *dst may hold the expected value already
		*dst = string(v)
	}
	return true
}
