// Package harness runs real holdfast processes for black-box tests.
//
// It owns building the holdfast binary once per test binary, allocating
// loopback ports, starting, signalling and restarting `holdfast serve`
// processes with their own data directories and log files, and small HTTP
// helpers for the ops endpoints. It is meant to be the base of the fault
// (Jepsen-style) suite: pauses (SIGSTOP/SIGCONT), kills, restarts with other
// flags, per-node advertise addresses (for TCP fault proxies) and extra flags
// per start are all available, and storage.go reads and damages a stopped
// node's log segments and snapshots for storage-fault tests.
//
// Typical use, from a test package's TestMain:
//
//	env, cleanup, err := harness.Setup(harness.BuildOptions{})
//	...
//	c := env.NewCluster(t, 3, harness.Options{})
//	c.StartBootstrap()
//	leader := c.WaitLeader()
//
// Rules it keeps: every wait polls with a deadline, every process is killed
// in t.Cleanup even when the test fails, traffic goes only to 127.0.0.1, and
// the package holds no package-level mutable state (the binary path and the
// port allocator travel in an Env). It must never leave a process running
// after its test, nor send traffic anywhere else.
//
// An Env's CheckResponse sees every answer Node.Do and Node.DoWith receive;
// the end-to-end tests set it to an OpenAPIChecker, so each answer must be
// one server/openapi.json describes.
//
// Process-control methods on Node return errors and may be called from any
// goroutine; the Cluster methods of the same names fail the test instead and
// must be called from the test's goroutine.
package harness
