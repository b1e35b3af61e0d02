// Package server is holdfast's HTTP face: the gin router with the ops
// endpoints, the REST API and the MCP endpoint, request validation, error
// mapping, forwarding to the leader, authentication of node-to-node calls and
// metrics.
//
// It must never answer a client's mistake with a 500, never report failure
// for a write whose outcome is unknown (that is a 503 saying so), never put
// a secret in a log line or a metric label, and never forward a request more
// than one hop.
package server
