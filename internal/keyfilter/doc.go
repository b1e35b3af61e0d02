// Package keyfilter is a blocked Bloom filter of byte keys: it answers
// "certainly absent" or "maybe present" with one cache line per question.
//
// The state machine keeps one of every record key its store holds, so
// that looking up a key that was never written (a new lease, queue or
// client, which is most lookups) costs no search of the store. A filter
// never forgets a key, so it is rebuilt from the store when the keys it
// took outnumber what it was sized for. It decides no outcome: a key it
// calls maybe present is looked up in the store as before.
//
// It never answers absent for a key it took (it has no deletion), and it
// does no I/O.
package keyfilter
