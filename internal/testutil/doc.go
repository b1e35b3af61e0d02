// Package testutil holds small helpers the tests of several packages share.
//
// It is imported by tests only and must never be imported by the service.
package testutil
