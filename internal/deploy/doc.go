// Package deploy writes the manifests `holdfast deploy kubernetes` prints:
// a headless Service through which the members find each other, a client
// Service, a StatefulSet running `holdfast serve` with the command line
// ServeArgs returns, and a PodDisruptionBudget that keeps a quorum up.
//
// The YAML is written with text/template from values this package has
// checked first, every value that comes from a flag quoted as a JSON
// string (which YAML reads as the same string), so an input can never add a
// key or a document. The tests of cmd/holdfast decode every document
// strictly into the Kubernetes API types; this package must never import
// k8s.io packages itself (they would all end up in the server's binary),
// and never talks to a cluster: it only prints.
package deploy
