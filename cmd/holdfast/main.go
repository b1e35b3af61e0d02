// Command holdfast runs a holdfast node and its companion tools.
//
// Usage:
//
//	holdfast serve [flags]            run a node (with no flags: a single-node cluster in ./holdfast-data)
//	holdfast example-worker [flags]   run the bounded example worker against a node
//	holdfast bench [flags]            closed-loop load against a cluster
//	holdfast tls ca create [flags]    make a cluster CA
//	holdfast tls cert create [flags]  issue a node or client certificate signed by the CA
//	holdfast help                     show this help
//
// Every serve flag has a HOLDFAST_* environment equivalent (--data-dir is
// HOLDFAST_DATA_DIR); a flag given on the command line wins.
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
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "example-worker":
		return exampleWorker(args[1:], stdout, stderr)
	case "bench":
		return bench(args[1:], stdout, stderr)
	case "tls":
		return tlsCommand(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "holdfast: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `holdfast: a highly available lease and job-queue service

Commands:
  serve           run a node; with no flags, a single-node cluster with its data in ./holdfast-data
  example-worker  create a queue, enqueue a sample job, claim, handle, ack and read it back
  bench           closed-loop load: lease or queue cycles per second and latency percentiles
  tls             make a cluster CA and issue node and client certificates ("holdfast tls -h")
  help            show this help

Run "holdfast serve -h" for the node's flags.
`)
}
