// Package tlsconf turns certificate files into TLS configurations that
// follow the files: a Source re-reads its certificate, key and CA bundle
// when they change on disk (or when asked, e.g. on SIGHUP), and every
// configuration built from it uses the newest good material at the next
// handshake. A broken new pair is logged and the previous one kept.
//
// It owns the TLS rules of holdfast's two kinds of connection: the API
// listener (TLS 1.2 or later, HTTP/2 by ALPN, optional client
// certificates) and the links between nodes (TLS 1.3, certificates required
// on both ends, verified against the peer CA, the remote node named by its
// certificate; see internal/pki for how a certificate names a node).
//
// It must never log key material, and never hand out a configuration that
// skips verification without doing it itself.
package tlsconf
