// Package wire is the compact binary encoding used for replicated commands and
// snapshots: unsigned and signed varints, fixed-size byte arrays and
// length-prefixed byte strings, appended to a byte slice and read back with
// bounds checks.
//
// It owns nothing but the byte layout. It must never allocate more than the
// input can justify: every length read from the input is checked against the
// bytes that remain before anything is allocated, so a corrupt or hostile
// entry produces an error, never a panic or a huge allocation.
package wire
