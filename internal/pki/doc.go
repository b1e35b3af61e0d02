// Package pki makes and reads holdfast's certificates: a cluster CA, node
// certificates that name their node, and client certificates.
//
// A node's identity is bound to its certificate by one URI subject
// alternative name, urn:holdfast:node:<node id> (the id path-escaped). A
// certificate is a node certificate only if it carries exactly one such
// name; client certificates carry none, so a client certificate issued by
// the same CA never makes its holder a peer.
//
// The package must never log or print a private key, and writes private
// keys only with mode 0600.
package pki
