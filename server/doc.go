// Package server is holdfast's HTTP face, adapters only: the gin router
// with the ops endpoints, the status page and metrics; the REST API and the
// MCP endpoint, which decode a request, call the service (server/service)
// and encode its answer; the wiring of the front (internal/httpfront) to
// the same REST handlers; the one mapping from a service error's kind to an
// HTTP status and JSON body; request body buffering and strict decoding
// (internal/strictjson); forwarding to the leader as a REST request when
// the leader refused this node a peer link; opening and accepting peer
// links (an HTTP upgrade) for the service; and authentication of
// node-to-node calls.
//
// It must never hold a rule of the API (those live in server/service, once
// for every transport), never answer a client's mistake with a 500, never
// report failure for a write whose outcome is unknown (that is a 503 saying
// so), never put a secret in a log line or a metric label, never forward a
// request more than one hop, and never let the front answer what gin's
// router would answer differently: a request the front's handlers would
// refuse before its body, or would make wait, is handed to net/http.
package server
