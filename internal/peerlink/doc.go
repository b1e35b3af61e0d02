// Package peerlink multiplexes request/response calls over one stream
// connection between two nodes. Each call is a frame (a 4-byte big-endian
// length, a call id as a uvarint, the payload); calls and answers that are
// ready together leave in one write, so a busy link costs a few system calls
// for many calls.
//
// A caller that gives up on a call it has sent (its context ended) sends a
// cancel frame, a frame with the call's id and an empty payload: the server
// cancels the context of that call's handler, if it is still running. Calls
// themselves never have an empty payload.
//
// It owns one promise about delivery, which callers need to answer honestly:
// a call that fails with ErrNotSent never left this process (the server
// cannot have acted on it), while ErrUnknown means its bytes may have
// reached the server. It knows nothing of what the payloads mean.
//
// The serving end never stops reading a link while its handlers are busy:
// calls beyond the slots wait in a bounded queue, and one that finds the
// queue full, or is cancelled while it waits, is answered by the busy
// handler without being run, so a cancel frame always arrives.
package peerlink
