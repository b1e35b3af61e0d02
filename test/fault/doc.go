//go:build unix

// Package fault is holdfast's Jepsen-style fault suite: it runs real
// holdfast processes (through test/harness), puts a TCP fault proxy on
// every directed link between them, drives concurrent clients, injects
// faults from outside the processes (kill, pause, partitions, clock skew,
// membership changes, damaged log segments and snapshots), records the
// history of every operation as JSON lines, heals, waits for the replicas to converge, and checks the history:
// linearizability of leases with Porcupine, fencing, durability of
// acknowledged work, queue totals and delivery rules, and equal state
// hashes. Planted-bug builds prove each check can fail.
//
// It owns the proxies, the recorder, the nemeses, the workloads, the
// checkers and the runner (budget, seeds, artifacts, result rows). It must
// never send traffic anywhere but 127.0.0.1, never leave a process or a
// fault behind (every fault is healed and every process is killed in
// t.Cleanup), and never hold package-level mutable state beyond the suite
// that TestMain sets once.
//
// See the README's "Fault tests" section for how to run it and what each
// part checks.
package fault
