// Command holdfast runs a holdfast node and its companion tools.
//
// Usage:
//
//	holdfast serve [flags]            run a node (with no flags: a single-node cluster in ./holdfast-data)
//	holdfast example-worker [flags]   run the bounded example worker against a node
//	holdfast bench [flags]            closed-loop load against a cluster
//	holdfast tls ca create [flags]    make a cluster CA
//	holdfast tls cert create [flags]  issue a node or client certificate signed by the CA
//	holdfast lease|queue|cluster ...  one API call, its JSON answer on stdout
//	holdfast snapshot save|inspect F  back the replicated state up, check a backup
//	holdfast exec [flags] -- CMD      run a command under a lease
//	holdfast work [flags] -- CMD      run a command per claimed job
//	holdfast dev [flags]              a local cluster of real node processes
//	holdfast deploy kubernetes        Kubernetes manifests for a cluster, on stdout
//	holdfast version                  version, commit and Go version
//	holdfast help                     show this help
//
// Every serve flag has a HOLDFAST_* environment equivalent (--data-dir is
// HOLDFAST_DATA_DIR); a flag given on the command line wins.
//
// It owns the process's edges: flags and their environment variables,
// start-up and graceful shutdown of serve, and the client commands' output
// and exit statuses. The rules of the API live below it (server,
// server/service, cluster, fsm); it must never write a secret to stderr or
// a log, never take a secret only from argv when an environment variable or
// @FILE can carry it, and never exit 0 on an outcome it did not see.
package main
