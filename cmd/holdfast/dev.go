package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast/holdfast/internal/devcluster"
)

// devCommand runs `holdfast dev`: a local cluster of real node processes on
// free loopback ports, until Ctrl-C. The nodes run in process groups of
// their own, so a signal from the terminal reaches only this process, and
// devcluster.Run gives each node one SIGTERM.
func devCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("holdfast dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", devcluster.DefaultNodes, "number of nodes: 1, 3 or 5")
	dir := fs.String("dir", devcluster.DefaultDir, "dev directory: node i keeps its data in <dir>/n<i> and its log in <dir>/n<i>.log")
	clean := fs.Bool("clean", false, "remove <dir> first (only if it is empty or a dev directory: one with ports.json)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: holdfast dev [--nodes 3] [--dir ./holdfast-dev] [--clean]

Runs a local cluster for trying things out: --nodes real "holdfast serve"
processes on free 127.0.0.1 ports, with serve's defaults (HOLDFAST_*
variables of this shell are not passed on). It waits until every node is
ready, prints their addresses and an export HOLDFAST_ADDR=... line, and runs
until Ctrl-C stops them all: the nodes run in process groups of their own,
so the terminal's signal reaches only holdfast dev, which sends each node
one SIGTERM (a second Ctrl-C kills them). On Linux the nodes also stop if
holdfast dev is killed; elsewhere they keep running, and holdfast dev on
the same --dir refuses to start until they are stopped. Started again on
the same --dir, the cluster keeps its data and its addresses (recorded in
<dir>/ports.json).

A node that stops while the cluster runs (it crashed, or you killed it to
try a failover) is named on stderr and started again after 3s on the same
data and addresses, and named again once it is ready; the others keep
serving meanwhile. A node that stops 3 times within 2 minutes is left down,
with the command line that starts it. When every node is left down,
holdfast dev says why each one is and exits with status 1.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "holdfast dev: unexpected arguments: %v\n", fs.Args())
		return 2
	}
	if err := devcluster.CheckNodes(*nodes); err != nil {
		fmt.Fprintf(stderr, "holdfast dev: %v\n", err)
		return 2
	}
	sigs := make(chan os.Signal, 4)
	stopOn := []os.Signal{os.Interrupt, syscall.SIGTERM}
	// A closed terminal sends SIGHUP (to this process only: the nodes, which
	// would take it as "reload the TLS files", are in groups of their own):
	// stop them then too, unless it is ignored (nohup).
	if !signal.Ignored(syscall.SIGHUP) {
		stopOn = append(stopOn, syscall.SIGHUP)
	}
	signal.Notify(sigs, stopOn...)
	defer signal.Stop(sigs)
	err := devcluster.Run(devcluster.Config{
		Nodes:   *nodes,
		Dir:     *dir,
		Clean:   *clean,
		Stdout:  stdout,
		Stderr:  stderr,
		Signals: sigs,
	})
	var usage *devcluster.UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "holdfast dev: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "holdfast dev: %v\n", err)
		return 1
	}
}
