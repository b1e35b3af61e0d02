//go:build unix

// Package test holds black-box tests that run real holdfast processes.
//
// The tests start the binary built from this module, send traffic only to
// 127.0.0.1, bound every wait, and check answers against the OpenAPI
// document; they must never reach into a package's internals.
package test
