//go:build linux

package hosts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NamePrefix begins the name of every network namespace this package
// creates: "hfh<pid>x<random>-<role>". The pid lets a later run remove the
// namespaces of a run that died without its cleanup (SweepStale).
const NamePrefix = "hfh"

// netnsDir is where `ip netns` keeps its named namespaces, and etcNetnsDir
// where it keeps the files `ip netns exec` bind-mounts over /etc.
const (
	netnsDir    = "/run/netns"
	etcNetnsDir = "/etc/netns"
)

// Requirements checks what the package needs from the machine: root, and
// the commands ip (iproute2), unshare and setpriv (util-linux) and mount.
// The error says what is missing.
func Requirements() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, fmt.Sprintf("root (running as uid %d): network, mount and UTS namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN", os.Geteuid()))
	}
	for _, c := range []struct{ cmd, pkg string }{{"ip", "iproute2"}, {"unshare", "util-linux"}, {"setpriv", "util-linux"}, {"mount", "mount"}} {
		if _, err := exec.LookPath(c.cmd); err != nil {
			missing = append(missing, fmt.Sprintf("the %q command (Debian package %s)", c.cmd, c.pkg))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("test/hosts needs %s", strings.Join(missing, ", and "))
	}
	return nil
}

// Namespace is one named network namespace of a Network: a pod's host, the
// client host, or the switch.
type Namespace struct {
	// Name is the namespace's name for `ip netns` (and /etc/netns/Name).
	Name string
	// Role is the short name within the network: "h0", "h1", ..., "cl" or
	// "sw".
	Role string
	// Dev is the interface that joins it to the switch ("eth0"; "br0" in
	// the switch itself).
	Dev string

	net *Network

	mu   sync.Mutex
	addr netip.Addr // the namespace's own address on Dev (invalid for the switch)
}

// Path is the namespace's file, for setns.
func (ns *Namespace) Path() string { return filepath.Join(netnsDir, ns.Name) }

// Addr returns the namespace's current address on Dev.
func (ns *Namespace) Addr() netip.Addr {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.addr
}

// String names the namespace for messages.
func (ns *Namespace) String() string { return ns.Name }

// Network is the namespaces of one test: a switch namespace holding a
// bridge, and one namespace per host (and one for the client), each joined
// to the bridge by a veth pair whose inner end is eth0. Every address is in
// one /24 between 10.64.0.0 and 10.191.255.0, chosen at random per run.
type Network struct {
	// ID is this run's part of the namespaces' names ("hfh<pid>x<hex>").
	ID string
	// Subnet is the run's /24.
	Subnet netip.Prefix
	// Switch holds the bridge (and whatever a test puts between hosts,
	// such as delay proxies).
	Switch *Namespace
	// Client is a host for clients.
	Client *Namespace
	// Hosts are the hosts of the pods, in order.
	Hosts []*Namespace

	mu    sync.Mutex
	used  map[netip.Addr]bool
	names []string // namespaces created, for the cleanup
}

// NewNetwork creates the switch, the client host and n pod hosts, and
// removes all of them (and their /etc/netns directories) in t.Cleanup, also
// when the test fails. It fails the test if the machine cannot do it.
func NewNetwork(t testing.TB, n int) *Network {
	t.Helper()
	if err := Requirements(); err != nil {
		t.Fatal(err)
	}
	SweepStale(t.Logf)
	var rnd [5]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	// 10.a.b.0/24 with a in 64..191: clear of the ranges container
	// runtimes and VPNs like most (10.0-10.63) without relying on it, since
	// no namespace of the network is connected to any other.
	subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 64 + rnd[0]%128, rnd[1], 0}), 24)
	nw := &Network{
		ID:     fmt.Sprintf("%s%dx%s", NamePrefix, os.Getpid(), hex.EncodeToString(rnd[2:5])),
		Subnet: subnet,
		used:   map[netip.Addr]bool{},
	}
	t.Cleanup(func() {
		if err := nw.destroy(); err != nil {
			t.Errorf("removing the network namespaces: %v", err)
		}
	})
	if err := nw.create(n); err != nil {
		t.Fatalf("creating the network namespaces: %v", err)
	}
	return nw
}

// hostAddr is the address of the subnet ending in octet (10.a.b.octet).
func (nw *Network) hostAddr(octet byte) netip.Addr {
	a := nw.Subnet.Addr().As4()
	a[3] = octet
	return netip.AddrFrom4(a)
}

// Allocate returns an address of the subnet not handed out before in this
// network (addresses are never reused, so a moved host's old address stays
// dead).
func (nw *Network) Allocate() (netip.Addr, error) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for o := 2; o < 254; o++ {
		a := nw.hostAddr(byte(o))
		if !nw.used[a] {
			nw.used[a] = true
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address left in %s", nw.Subnet)
}

func (nw *Network) create(n int) error {
	nw.used[nw.hostAddr(254)] = true
	nw.Switch = &Namespace{Name: nw.ID + "-sw", Role: "sw", Dev: "br0", net: nw}
	if err := nw.addNamespace(nw.Switch); err != nil {
		return err
	}
	sw := nw.Switch.Name
	if err := ipBatch(
		[]string{"-n", sw, "link", "add", "br0", "type", "bridge"},
		[]string{"-n", sw, "addr", "add", nw.hostAddr(254).String() + "/24", "dev", "br0"},
		[]string{"-n", sw, "link", "set", "br0", "up"},
	); err != nil {
		return err
	}
	add := func(role string) (*Namespace, error) {
		a, err := nw.Allocate()
		if err != nil {
			return nil, err
		}
		ns := &Namespace{Name: nw.ID + "-" + role, Role: role, Dev: "eth0", net: nw, addr: a}
		if err := nw.addNamespace(ns); err != nil {
			return nil, err
		}
		port := "p" + role
		return ns, ipBatch(
			[]string{"-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
			[]string{"-n", sw, "link", "set", port, "master", "br0", "up"},
			[]string{"-n", ns.Name, "addr", "add", a.String() + "/24", "dev", "eth0"},
			[]string{"-n", ns.Name, "link", "set", "eth0", "up"},
		)
	}
	var err error
	if nw.Client, err = add("cl"); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		h, err := add("h" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		nw.Hosts = append(nw.Hosts, h)
	}
	return nil
}

// addNamespace creates the named namespace with its loopback up and an
// /etc/netns directory whose resolv.conf points at nothing that answers
// (the hosts file is the only name service, so a name it lacks fails at
// once) and whose nsswitch.conf, where the machine has one, reads files
// before DNS.
func (nw *Network) addNamespace(ns *Namespace) error {
	if err := ip("netns", "add", ns.Name); err != nil {
		return err
	}
	nw.mu.Lock()
	nw.names = append(nw.names, ns.Name)
	nw.mu.Unlock()
	if err := ip("-n", ns.Name, "link", "set", "lo", "up"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(etcNetnsDir, ns.Name), 0o755); err != nil {
		return err
	}
	// A query to 127.0.0.1:53 inside the namespace is refused by its own
	// loopback: no DNS traffic ever leaves the namespace.
	if err := ns.WriteEtc("resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"); err != nil {
		return err
	}
	if _, err := os.Stat("/etc/nsswitch.conf"); err == nil {
		if err := ns.WriteEtc("nsswitch.conf", "hosts: files dns\n"); err != nil {
			return err
		}
	}
	return ns.WriteEtc("hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
}

// destroy deletes every namespace of the network (with its veths) and
// their /etc/netns directories. Processes must be gone first: a
// namespace lives on while a process or socket is in it.
func (nw *Network) destroy() error {
	nw.mu.Lock()
	names := append([]string(nil), nw.names...)
	nw.names = nil
	nw.mu.Unlock()
	var errs []error
	for i := len(names) - 1; i >= 0; i-- {
		errs = append(errs, removeNamespace(names[i]))
	}
	_ = os.Remove(etcNetnsDir) // only if empty: other users' namespaces may be there
	return errors.Join(errs...)
}

func removeNamespace(name string) error {
	var errs []error
	if _, err := os.Stat(filepath.Join(netnsDir, name)); err == nil {
		if err := ip("netns", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(filepath.Join(etcNetnsDir, name)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// staleName matches the namespaces NewNetwork names, capturing the pid of
// the test process that made them.
var staleName = regexp.MustCompile(`^` + NamePrefix + `([0-9]+)x[0-9a-f]+-[a-z0-9]+$`)

// SweepStale removes the namespaces (and /etc/netns directories) of runs
// of this package whose test process no longer exists: a run killed
// before its cleanups (a ^C, a -timeout panic) leaves them behind. Its
// node processes died with it (they run with a parent-death signal).
func SweepStale(logf func(format string, args ...any)) {
	seen := map[string]bool{}
	for _, dir := range []string{netnsDir, etcNetnsDir} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			m := staleName.FindStringSubmatch(e.Name())
			if m == nil || seen[e.Name()] {
				continue
			}
			seen[e.Name()] = true
			pid, _ := strconv.Atoi(m[1])
			if pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				continue // ours, or its process is still there
			}
			if err := removeNamespace(e.Name()); err != nil {
				logf("removing the stale namespace %s: %v", e.Name(), err)
			} else {
				logf("removed the stale namespace %s of an earlier run (pid %d is gone)", e.Name(), pid)
			}
		}
	}
}

// ip runs one ip(8) command.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ipBatch runs ip commands in order, stopping at the first failure.
func ipBatch(cmds ...[]string) error {
	for _, c := range cmds {
		if err := ip(c...); err != nil {
			return err
		}
	}
	return nil
}

// SetLink brings the namespace's interface up or down: down cuts the host
// off from every other (its own loopback still works).
func (ns *Namespace) SetLink(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip("-n", ns.Name, "link", "set", ns.Dev, state)
}

// SetAddr replaces the namespace's address with a, as a host that comes
// back on a new IP.
func (ns *Namespace) SetAddr(a netip.Addr) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.addr.IsValid() {
		if err := ip("-n", ns.Name, "addr", "del", ns.addr.String()+"/24", "dev", ns.Dev); err != nil {
			return err
		}
	}
	if err := ip("-n", ns.Name, "addr", "add", a.String()+"/24", "dev", ns.Dev); err != nil {
		return err
	}
	ns.addr = a
	return nil
}

// AddAddr adds a further address of the subnet to the namespace's
// interface; DelAddr removes it.
func (ns *Namespace) AddAddr(a netip.Addr) error {
	return ip("-n", ns.Name, "addr", "add", a.String()+"/24", "dev", ns.Dev)
}

// DelAddr removes an address AddAddr added.
func (ns *Namespace) DelAddr(a netip.Addr) error {
	return ip("-n", ns.Name, "addr", "del", a.String()+"/24", "dev", ns.Dev)
}

// EtcPath is the file `ip netns exec` bind-mounts over /etc/name for
// processes started in the namespace.
func (ns *Namespace) EtcPath(name string) string {
	return filepath.Join(etcNetnsDir, ns.Name, name)
}

// WriteEtc writes /etc/netns/<ns>/name in place: truncated and written
// with one write on the same inode, because `ip netns exec` bind-mounts
// the file itself into each process's /etc, so a new file renamed over it
// would never be seen by a running process. A reader between the truncate
// and the write sees an empty file; Go's resolver reads an empty hosts
// file again at its next lookup.
func (ns *Namespace) WriteEtc(name, content string) error {
	f, err := os.OpenFile(ns.EtcPath(name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(content))
	cerr := f.Close()
	return errors.Join(werr, cerr)
}

// Command returns a command that runs in the namespace under `ip netns
// exec` (its own mount namespace, with /etc/netns/<ns>/* over /etc).
func (ns *Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// InNamespace runs fn on an OS thread that has entered the network
// namespace at path, and returns fn's error. Sockets fn creates (listeners,
// dialled connections) belong to that namespace for their whole life and
// may be used from any goroutine afterwards. The thread is never unlocked:
// when fn returns, its goroutine ends and the Go runtime discards the
// thread, so no other goroutine ever runs in the namespace. Goroutines fn
// starts run in the test's own namespace, not this one.
func InNamespace(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		_ = f.Close()
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// checkAddr refuses an address outside the network (names included: a
// name would be resolved by the test's own resolver).
func (nw *Network) checkAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !(nw.Subnet.Contains(a) || a.IsLoopback() || a.IsUnspecified()) {
		return fmt.Errorf("test/hosts: refusing the address %q: only IP addresses of %s or loopback", addr, nw.Subnet)
	}
	return nil
}

// Listen listens on addr (an IP address of the network and a port) inside
// the namespace.
func (ns *Namespace) Listen(addr string) (net.Listener, error) {
	if err := ns.net.checkAddr(addr); err != nil {
		return nil, err
	}
	var ln net.Listener
	err := InNamespace(ns.Path(), func() error {
		var err error
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	return ln, err
}

// DialContext connects to addr (an IP address of the network and a port)
// from inside the namespace.
func (ns *Namespace) DialContext(ctx context.Context, addr string) (net.Conn, error) {
	if err := ns.net.checkAddr(addr); err != nil {
		return nil, err
	}
	var c net.Conn
	err := InNamespace(ns.Path(), func() error {
		var err error
		// An IP literal: no resolver, no happy-eyeballs goroutines, so the
		// socket is made on this thread.
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp4", addr)
		return err
	})
	return c, err
}
