// Package hosts runs holdfast as its Kubernetes StatefulSet would run it,
// on "hosts" made of Linux network namespaces, and checks that the cluster
// forms, serves, restarts, moves and heals there.
//
// The manifest comes from the binary under test (`holdfast deploy
// kubernetes --image x --replicas N`); each pod runs exactly the command,
// args and environment of its container, expanded as the kubelet expands
// them, as root in its own network, mount and UTS namespaces: hostname the
// pod's name, the binary at the command's path on a tmpfs, a persistent
// directory (the PersistentVolumeClaim) at the volume's mount path, a
// Secret's volume laid out as the kubelet's (with --tls-secret), and an
// /etc/hosts standing in for cluster DNS. Hosts reach one another only
// through a TCP proxy of this package that adds 1 ms ± 0.25 ms each way
// (the kernel of the machines it runs on has no netem). Cutting a host off
// is taking its link down.
//
// It owns the namespaces (netns.go), the delay proxy (delay.go), and the
// manifest, the pods and the hosts files (pods.go). It must only send
// traffic inside the namespaces it creates, never change the machine's
// own /etc (only /etc/netns/<its namespaces>), /usr/local/bin or /var/lib,
// never leave a namespace, a process or a directory behind (everything is
// removed in t.Cleanup, also when a test fails, and SweepStale removes what
// a killed run left), and hold no package-level mutable state.
//
// It needs root, iproute2 and util-linux; without them the tests fail,
// except under -short, where they are skipped. See README.md for what the
// tests check and how to run them.
package hosts
