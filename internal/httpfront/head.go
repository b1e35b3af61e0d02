package httpfront

import (
	"bytes"
	"strings"
)

// headLimit is the longest request head the front reads; a longer one goes
// to net/http, which applies MaxHeaderBytes.
const headLimit = 16 << 10

// maxParams is the most path parameters a route may have.
const maxParams = 4

// maxHeaders is the most headers Config.Headers may name.
const maxHeaders = 8

// verdict is what the head read so far says of the request.
type verdict int

const (
	// more: the head is not whole yet, and may be one the front serves.
	more verdict = iota
	// served: the head is whole and is one the front serves.
	served
	// handOver: the request is not one the front serves.
	handOver
)

// route is a route template split into segments; a segment starting with
// ':' is a parameter.
type route struct {
	path     string
	segs     []string
	params   []string
	statics  int
	position int // its index in Config.Routes
}

// router matches paths against the routes the front serves.
type router struct{ routes []route }

// newRouter splits the templates; among the routes a path matches, the one
// with a literal segment where the others have a parameter wins, as in
// gin's router.
func newRouter(templates []string) router {
	var r router
	for i, t := range templates {
		rt := route{path: t, position: i, segs: strings.Split(strings.TrimPrefix(t, "/"), "/")}
		for _, s := range rt.segs {
			if strings.HasPrefix(s, ":") {
				rt.params = append(rt.params, s[1:])
			} else {
				rt.statics++
			}
		}
		if len(rt.params) > maxParams {
			panic("httpfront: route " + t + " has more than 4 parameters")
		}
		r.routes = append(r.routes, rt)
	}
	return r
}

// match returns the route a path of only path bytes matches and fills
// params, or nil.
func (r *router) match(path []byte, params *[maxParams]string) *route {
	if len(path) < 2 || path[0] != '/' {
		return nil
	}
	var segs [12][]byte
	n := 0
	for rest := path[1:]; ; {
		if n == len(segs) {
			return nil
		}
		seg, after, found := bytes.Cut(rest, []byte("/"))
		if len(seg) == 0 || string(seg) == "." || string(seg) == ".." {
			return nil
		}
		segs[n] = seg
		n++
		if !found {
			break
		}
		rest = after
	}
	var best *route
	for i := range r.routes {
		rt := &r.routes[i]
		if len(rt.segs) != n || (best != nil && !wins(rt, best)) {
			continue
		}
		ok := true
		for j, s := range rt.segs {
			if s[0] != ':' && s != string(segs[j]) {
				ok = false
				break
			}
		}
		if ok {
			best = rt
		}
	}
	if best == nil {
		return nil
	}
	p := 0
	for j, s := range best.segs {
		if s[0] == ':' {
			params[p] = string(segs[j])
			p++
		}
	}
	return best
}

// wins reports whether a beats b where both match: the first segment at
// which they differ is literal in a.
func wins(a, b *route) bool {
	for j := range a.segs {
		as, bs := a.segs[j][0] == ':', b.segs[j][0] == ':'
		if as != bs {
			return !as
		}
	}
	return false
}

// headParser reads a request head as its bytes arrive, each line once.
type headParser struct {
	// pos is where the first line not yet read starts.
	pos int
	// line is the next line's number: 0 is the request line.
	line int
	// Counts of the headers that must appear exactly once.
	hosts, lengths int
	length         int
	seen           uint16
}

// reset readies the parser for a request at the start of a buffer.
func (p *headParser) reset() { *p = headParser{length: -1} }

// parse reads the complete lines of buf from where it stopped, filling req.
func (f *Front) parse(p *headParser, buf []byte, req *Request) verdict {
	for {
		rest := buf[p.pos:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if p.line == 0 && !couldBePost(rest) {
				return handOver
			}
			return more
		}
		if i < 1 || rest[i-1] != '\r' || bytes.IndexByte(rest[:i-1], '\r') >= 0 {
			return handOver // a bare LF or a stray CR: net/http's to judge
		}
		line := rest[:i-1]
		p.pos += i + 1
		if p.line == 0 {
			if !f.requestLine(line, req) {
				return handOver
			}
			p.line++
			continue
		}
		p.line++
		if len(line) == 0 {
			if p.hosts != 1 || p.lengths != 1 || p.length < 0 || p.length > f.cfg.BodyLimit {
				return handOver
			}
			req.head, req.bodyLen = p.pos, p.length
			return served
		}
		if !f.header(p, line, req) {
			return handOver
		}
	}
}

// couldBePost reports whether an incomplete request line may still be a
// POST with an absolute path.
func couldBePost(b []byte) bool {
	const prefix = "POST /"
	n := min(len(b), len(prefix))
	return string(b[:n]) == prefix[:n]
}

// requestLine reads "POST <served route> HTTP/1.1".
func (f *Front) requestLine(line []byte, req *Request) bool {
	const method, version = "POST ", " HTTP/1.1"
	if len(line) <= len(method)+len(version) || !bytes.HasPrefix(line, []byte(method)) || !bytes.HasSuffix(line, []byte(version)) {
		return false
	}
	target := line[len(method) : len(line)-len(version)]
	for _, c := range target {
		if !isPathByte(c) {
			return false
		}
	}
	rt := f.router.match(target, &req.params)
	if rt == nil {
		return false
	}
	req.rt = rt
	return true
}

// header reads one header line.
func (f *Front) header(p *headParser, h []byte, req *Request) bool {
	colon := bytes.IndexByte(h, ':')
	if colon <= 0 {
		return false
	}
	name, value := h[:colon], trimOWS(h[colon+1:])
	if !isToken(name) || !isFieldValue(value) {
		return false
	}
	switch {
	case fold(name, "content-length"):
		p.lengths++
		p.length = parseLength(value)
		return true
	case fold(name, "host"):
		p.hosts++
		return isHost(value)
	case fold(name, "connection"):
		switch {
		case fold(value, "close"):
			req.Close = true
		case fold(value, "keep-alive"):
		default:
			return false
		}
		return true
	case fold(name, "transfer-encoding"), fold(name, "expect"), fold(name, "upgrade"), fold(name, "te"), fold(name, "trailer"):
		return false
	}
	for _, r := range f.cfg.Refuse {
		if fold(name, r) {
			return false
		}
	}
	for i, want := range f.cfg.Headers {
		if fold(name, want) {
			bit := uint16(1) << i
			if p.seen&bit != 0 {
				return false // a repeated header: net/http's to judge
			}
			p.seen |= bit
			req.present |= bit
			if string(value) != req.values[i] { // the common value may be there already
				req.values[i] = string(value)
			}
			return true
		}
	}
	return true
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

// fold reports whether b equals s, ignoring ASCII case.
func fold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
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
