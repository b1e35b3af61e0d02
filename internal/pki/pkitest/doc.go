// Package pkitest makes CAs and certificates on disk for tests.
//
// It is used by tests only and must never be imported by the service.
package pkitest
