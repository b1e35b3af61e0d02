// Package devcluster runs a local holdfast cluster for trying things out:
// N real `holdfast serve` processes on loopback ports, each with its data
// directory and log file under one dev directory. It is what `holdfast dev`
// runs.
//
// The dev directory holds, for node i (n1, n2, ...), its data in n<i> and
// its log in n<i>.log, plus ports.json with every node's addresses (reused
// when the cluster is started again on the same directory, because Raft's
// membership records them) and pids with the running nodes' process ids.
//
// Every node runs in a process group of its own, so a terminal's Ctrl-C
// (or the SIGHUP of a closed terminal) reaches only the dev process, which
// then sends each node exactly one SIGTERM: `holdfast serve` exits at once
// on a second signal. On Linux a node also gets SIGTERM from the kernel if
// the dev process dies without stopping it (it was killed with SIGKILL; the
// signal may then come more than once, so the node may exit at once rather
// than gracefully); elsewhere such nodes keep running, and the next Run on
// the directory refuses to start while they answer.
//
// Once the cluster is ready, a node that exits (a crash, kill -9, a SIGTERM
// from elsewhere) is named and started again after a pause on the same
// data directory and addresses, while the others keep serving, as a real
// cluster's supervisor would, and named again once it is ready; one that
// keeps exiting is left down, with the command line that starts it, as is
// one that cannot be started again. Once every node is left down, Run
// ends with an error saying why each is down.
//
// It must never signal a process it did not start, never remove a
// directory that is not a dev directory, and never leave a node running
// after a clean stop.
package devcluster
