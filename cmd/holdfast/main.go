package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if asksHelp(args[1:]) {
		// Help asked of a command is its output, as `holdfast --help` is.
		stderr = stdout
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "example-worker":
		return exampleWorker(args[1:], stdout, stderr)
	case "bench":
		return bench(args[1:], stdout, stderr)
	case "tls":
		return tlsCommand(args[1:], stdout, stderr)
	case "lease":
		return leaseCommand(args[1:], stdout, stderr)
	case "queue":
		return queueCommand(args[1:], stdout, stderr)
	case "cluster":
		return clusterCommand(args[1:], stdout, stderr)
	case "snapshot":
		return snapshotCommand(args[1:], stdout, stderr)
	case "exec":
		return execCommand(args[1:], stdout, stderr)
	case "work":
		return workCommand(args[1:], stdout, stderr)
	case "dev":
		return devCommand(args[1:], stdout, stderr)
	case "deploy":
		return deployCommand(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		return version(stdout)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "holdfast: unknown command %q%s\n\n", args[0], suggest(args[0], commandNames()))
	usage(stderr)
	return 2
}

// commandNames are the top-level commands, for suggestions.
func commandNames() []string {
	return []string{"serve", "example-worker", "bench", "tls", "lease", "queue", "cluster", "snapshot", "exec", "work", "dev", "deploy", "version", "help"}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `holdfast: a highly available lease and job-queue service

Commands:
  serve           run a node; with no flags, a single-node cluster with its data in ./holdfast-data
  example-worker  create a queue, enqueue a sample job, claim, handle, ack and read it back
  bench           closed-loop load: lease or queue cycles per second and latency percentiles
  tls             make a cluster CA and issue node and client certificates ("holdfast tls -h")
  lease           namespace, acquire, renew, release, complete ("holdfast lease -h")
  queue           create, enqueue, claim, ack, release, renew, retry, get, job ("holdfast queue -h")
  cluster         status, settings, join, remove ("holdfast cluster -h")
  snapshot        save FILE (a backup of the replicated state), inspect FILE
  exec            run a command under a lease, with its fencing token in the environment
  work            run a command for each claimed job: exit 0 acks, anything else releases
  dev             start a local cluster of real node processes on free loopback ports
  deploy          print Kubernetes manifests for a cluster ("holdfast deploy kubernetes -h")
  version         print the version, commit and Go version
  help            show this help

Run "holdfast serve -h" for the node's flags, "holdfast <command> -h" for any other's.

Client commands print the API's JSON answer on stdout (cluster status, on a
terminal, a table; --json for the JSON) and exit with
  0 success   1 any other failure   2 usage error   3 try later (held, 429, 503,
  507 storage, outcome unknown, empty queue)   4 conflict (fingerprint or
  payload)   5 lost (owner token or receipt no longer valid)
`)
}
