// Package server is holdfast's HTTP face: the gin router with the ops
// endpoints, the status page and metrics; the front, which reads and
// answers the API's common writes itself on plain HTTP and hands every
// other request to net/http; the REST API and the MCP
// endpoint, which decode a request, call the service (server/service) and
// encode its answer; the one mapping from a service error's kind to an HTTP
// status and JSON body; request body buffering and strict decoding;
// forwarding to the leader as a REST request when the leader refused this
// node a peer link; opening and accepting peer links (an HTTP upgrade) for
// the service; and authentication of node-to-node calls.
//
// It must never hold a rule of the API (those live in server/service, once
// for every transport), never answer a client's mistake with a 500, never
// report failure for a write whose outcome is unknown (that is a 503 saying
// so), never put a secret in a log line or a metric label, never
// forward a request more than one hop, and never let the front answer a
// request net/http would read differently (it hands those over unanswered).
package server
