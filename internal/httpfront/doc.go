// Package httpfront is a fast path in front of a net/http server: it reads
// the requests of a plain-HTTP listener itself, answers the few it is told
// to serve, and hands every other request, with its connection, to the
// net/http server unanswered.
//
// # What it may answer
//
// A request the front answers is an HTTP/1.1 POST whose target is one of
// Config.Routes (a path of unreserved characters, sub-delimiters, ':', '@'
// and '/', with no query, escape, dot or empty segment), framed by exactly
// one Content-Length of at most Config.BodyLimit bytes, with exactly one
// valid Host, at most one of each header in Config.Headers, none of the
// headers that change framing or meaning (Transfer-Encoding, Expect,
// Upgrade, TE, Trailer, and Config.Refuse), a Connection of only close or
// keep-alive, every line ending in CRLF and every header value of visible
// ASCII, spaces and tabs, whose head is shorter than 16 KiB and than the
// server's MaxHeaderBytes, and which the handler admits once its head is
// read and serves once its body is.
//
// # Everything else is handed over unanswered from its first byte
//
// The first request that is anything else (or whose head ends early, times
// out or fails to read, or that the handler does not admit or hands over
// after reading its body) goes to net/http with its connection: net/http
// reads the connection from that request's first byte, as if it had
// accepted it, and keeps it. The handed-over connection has the listener's
// CloseWrite (net/http's lingering close) and ReadFrom (sendfile). Until
// net/http has read that request's head, the read deadlines it sets are
// moved back by the time the front already spent on the request, so
// net/http's timeouts count from where they would have counted had it read
// the connection all along. A request is answered by one server only.
//
// # net/http's rules apply to what it answers
//
// Every timeout, limit and tolerance of net/http's server applies to what
// the front answers exactly as net/http applies it, read from Config.Server:
//   - ReadHeaderTimeout (or ReadTimeout when it is unset) bounds a
//     connection's first request head from the moment it is accepted, and
//     each later head from the moment its first four bytes are there;
//   - IdleTimeout (or ReadTimeout) bounds the wait after an answer until
//     the next request's first four bytes arrive; a connection that ends or
//     times out before then is closed without an answer;
//   - once the head is read, Config.BodyTimeout (counted from the end of
//     the head) bounds the body, standing for the read deadline the
//     net/http handlers of the same routes set before they read it; without
//     one, ReadTimeout does, counted from the request's start;
//   - WriteTimeout bounds an answer from the end of its request's head;
//   - a head of 16 KiB or more, or of MaxHeaderBytes or more, goes to
//     net/http, which applies its limit to it (431);
//   - after a POST, up to four CR or LF bytes before the next request are
//     skipped (RFC 9112's tolerance, as net/http skips them);
//   - a connection the front closes after an answer (the client asked, or
//     the body did not arrive whole) is closed as net/http closes it.
//
// # Where it differs, by design
//
// net/http cancels a request's context when the client goes away while its
// handler runs. The front does not watch the connection while it serves: a
// request that would wait (a handler that would block on the client's
// behalf) must be handed over before it waits, which the handler decides
// from the decoded request, never from raw bytes. A request that does not
// wait runs to its end even if its client leaves, as it may under net/http
// when the handler is quicker than the client's leaving.
//
// It must never answer a request net/http would read differently, never
// answer after handing over, never hand over after answering anything of a
// request, and never hold a connection's bytes back from net/http.
package httpfront
