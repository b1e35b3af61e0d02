// Package strictjson decodes client JSON by the rules holdfast promises and
// reduces a refusal to what a client may be told: what is wrong and where.
//
// It decodes with the JSON v2 decoder, whose defaults are those rules:
// duplicate member names are refused at every depth, member names match
// exactly, and strings must be valid UTF-8 (an escaped lone surrogate
// included). encoding/json would keep the last duplicate, match names
// case-insensitively and replace invalid bytes with U+FFFD, so that two
// different byte strings could name the same lease.
//
// It must never put the offending value in a Problem: values can be
// secrets, and the decoder's own messages quote them.
package strictjson
