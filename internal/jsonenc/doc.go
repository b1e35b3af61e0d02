// Package jsonenc encodes holdfast's JSON answers without reflection: an
// answer is an H of strings, integers, booleans, nil, stored JSON and nested
// H, written with sorted keys exactly as encoding/json writes them with HTML
// escaping off (a test compares the two on arbitrary values). Any other
// value type falls back to encoding/json for the whole value.
//
// It owns the byte layout of answers, so REST and the peer link's refusals
// read alike; it must never reorder keys or escape HTML differently from
// encoding/json, which clients' byte-level expectations rely on.
package jsonenc
