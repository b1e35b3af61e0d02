//go:build linux

package hosts

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Options configure a Deployment.
type Options struct {
	// Binary is the holdfast binary: it prints the manifest and is what
	// every pod runs as the container's command.
	Binary string
	// Replicas is the StatefulSet's size.
	Replicas int
	// Delay is added by the proxy in front of every pod, each direction
	// (default DefaultDelay, unless NoDelay).
	Delay Delay
	// NoDelay keeps the proxies but adds no delay: a control for what the
	// proxies themselves cost.
	NoDelay bool
	// ExtraArgs are appended to the container's args on every start. Empty
	// for every check: the pods run the manifest's command line exactly.
	// The figures use it only for --rate-limit=0, as the loopback cluster
	// they are compared with does.
	ExtraArgs []string
	// Dir holds the pods' volumes and logs (default t.TempDir()).
	Dir string
	// DeployArgs are added to `holdfast deploy kubernetes --image x
	// --replicas N` (--tls-secret NAME).
	DeployArgs []string
	// Secrets are the namespace's Secrets by name, each key's bytes: what
	// a secret volume of the pod holds and a secretKeyRef gives (the
	// cluster key the test makes stands for any Secret not listed).
	Secrets map[string]map[string][]byte
	// CAFile is the PEM CA bundle the test's client and the holdfast
	// commands it runs in the client host trust, for a manifest whose
	// probes are HTTPS (the API serves TLS).
	CAFile string
}

// Deployment is the StatefulSet of `holdfast deploy kubernetes` run on the
// hosts of a Network: one pod per host, each a holdfast process in its own
// mount and UTS namespace with the manifest's command, args and env.
//
// The network between hosts is the switch namespace: pod j's host has its
// own address A_j; in the switch, a proxy per container port listens on a
// second address D_j and forwards to A_j with the delay. Every other
// namespace's hosts file maps pod j's DNS name (and the Services' names)
// to D_j, so all traffic between hosts, and from the client host, crosses
// a proxy once; pod j's own hosts file maps its own name to A_j, as its
// kubelet-written /etc/hosts would.
type Deployment struct {
	opts Options

	// Net is the hosts and the switch.
	Net *Network
	// Workload is the decoded manifest.
	Workload *Workload
	// Key is the cluster key the test made: the value of the secret the
	// container's env refers to.
	Key string
	// Pods are the StatefulSet's pods, by ordinal.
	Pods []*Pod

	ports     []int  // the container ports every proxy pair covers
	httpPort  int    // the readiness probe's port
	scheme    string // the probe's scheme: http, or https when the API serves TLS
	client    *http.Client
	probe     *http.Client // the kubelet's: HTTPS without checking the certificate
	spawn     *spawner
	closeOnce sync.Once

	mu        sync.Mutex
	delayAddr []netip.Addr // D_j, in the switch
	proxies   [][]*Proxy   // per pod, one per port
}

// NewDeployment makes the network and the pods (not started) and writes
// every host's /etc files; t.Cleanup kills the pods, closes the proxies
// and removes the namespaces, also when the test fails, printing the tail
// of each pod's log when it failed.
func NewDeployment(t testing.TB, opts Options) *Deployment {
	t.Helper()
	if opts.Delay == (Delay{}) && !opts.NoDelay {
		opts.Delay = DefaultDelay()
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
		if os.Getenv(harness.KeepLogsEnv) != "" {
			dir, err := os.MkdirTemp("", "hf-hosts-")
			if err != nil {
				t.Fatal(err)
			}
			opts.Dir = dir
			t.Logf("%s is set: the pods' volumes and logs stay in %s", harness.KeepLogsEnv, dir)
		}
	}
	if err := Requirements(); err != nil {
		t.Fatal(err)
	}
	w, err := LoadWorkload(context.Background(), opts.Binary, opts.Replicas, opts.DeployArgs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(opts.Replicas); err != nil {
		t.Fatalf("the StatefulSet of holdfast deploy kubernetes cannot run as it is:\n%v\n%s", err, w.YAML)
	}
	nw := NewNetwork(t, opts.Replicas)
	var key [32]byte
	if _, err := crand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	d := &Deployment{opts: opts, Net: nw, Workload: w, Key: hex.EncodeToString(key[:]), spawn: newSpawner()}
	if d.httpPort, err = w.ReadinessPort(); err != nil {
		t.Fatal(err)
	}
	d.ports = d.containerPorts()
	t.Cleanup(func() {
		failed := t.Failed()
		d.Close()
		if failed {
			for _, p := range d.Pods {
				t.Logf("--- last lines of %s's stderr (%s):\n%s", p.Name, p.LogPath, p.Tail(40))
			}
		}
	})
	d.scheme = "http"
	var roots *x509.CertPool
	if w.ReadinessScheme() == corev1.URISchemeHTTPS {
		d.scheme = "https"
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			t.Fatalf("the probes are HTTPS: the test's client needs Options.CAFile: %v", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			t.Fatalf("no certificate in %s", opts.CAFile)
		}
	}
	transport := func(tc *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         d.dialFromClient,
			TLSClientConfig:     tc,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	d.client = transport(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
	// The kubelet's HTTPS probe does not check the certificate.
	d.probe = transport(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // as the kubelet probes
	for i := 0; i < opts.Replicas; i++ {
		dir := filepath.Join(opts.Dir, w.PodName(i))
		p := &Pod{Index: i, Name: w.PodName(i), Host: nw.Hosts[i], Dir: dir, LogPath: filepath.Join(dir, "stderr.log"), d: d}
		for _, m := range w.Container().VolumeMounts {
			if err := os.MkdirAll(p.VolumeDir(m.Name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(p.scratchDir(), 0o755); err != nil {
			t.Fatal(err)
		}
		d.Pods = append(d.Pods, p)
		a, err := nw.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		d.delayAddr = append(d.delayAddr, a)
		d.proxies = append(d.proxies, nil)
		if err := d.placeProxies(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.WriteHostsFiles(); err != nil {
		t.Fatal(err)
	}
	return d
}

// containerPorts are the ports proxied for each pod: the container's
// declared ports, else the ports of its listen flags.
func (d *Deployment) containerPorts() []int {
	var ports []int
	for _, p := range d.Workload.Container().Ports {
		ports = append(ports, int(p.ContainerPort))
	}
	if len(ports) == 0 {
		for _, a := range d.Workload.Container().Args {
			for _, f := range []string{"--http-addr=", "--raft-addr="} {
				if v, ok := strings.CutPrefix(a, f); ok {
					if _, port, err := net.SplitHostPort(v); err == nil {
						if n, err := strconv.Atoi(port); err == nil {
							ports = append(ports, n)
						}
					}
				}
			}
		}
	}
	if !slices.Contains(ports, d.httpPort) {
		ports = append(ports, d.httpPort)
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// placeProxies adds D_i to the switch and starts a proxy per port from D_i
// to the pod's host address.
func (d *Deployment) placeProxies(i int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.Net.Switch.AddAddr(d.delayAddr[i]); err != nil {
		return err
	}
	for _, port := range d.ports {
		p, err := NewProxy(d.Net.Switch, netip.AddrPortFrom(d.delayAddr[i], uint16(port)).String(),
			d.Net.Switch, netip.AddrPortFrom(d.Pods[i].Host.Addr(), uint16(port)).String(), d.opts.Delay)
		if err != nil {
			return err
		}
		d.proxies[i] = append(d.proxies[i], p)
	}
	return nil
}

// DelayAddr is D_i, the address pod i is reached at from every other host.
func (d *Deployment) DelayAddr(i int) netip.Addr {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.delayAddr[i]
}

// Move gives pod i's host a new address A_i and pod i a new D_i (the old
// proxies and address are removed), and rewrites every hosts file in
// place: a pod rescheduled with a new IP. The pod must not be running.
func (d *Deployment) Move(i int) (oldA, newA netip.Addr, err error) {
	p := d.Pods[i]
	if p.Running() {
		return oldA, newA, fmt.Errorf("move %s: it is running", p.Name)
	}
	d.mu.Lock()
	for _, px := range d.proxies[i] {
		px.Close()
	}
	d.proxies[i] = nil
	oldD := d.delayAddr[i]
	d.mu.Unlock()
	if err := d.Net.Switch.DelAddr(oldD); err != nil {
		return oldA, newA, err
	}
	oldA = p.Host.Addr()
	if newA, err = d.Net.Allocate(); err != nil {
		return oldA, newA, err
	}
	newD, err := d.Net.Allocate()
	if err != nil {
		return oldA, newA, err
	}
	if err := p.Host.SetAddr(newA); err != nil {
		return oldA, newA, err
	}
	d.mu.Lock()
	d.delayAddr[i] = newD
	d.mu.Unlock()
	if err := d.placeProxies(i); err != nil {
		return oldA, newA, err
	}
	return oldA, newA, d.WriteHostsFiles()
}

// HostsFile renders the /etc/hosts of a namespace: self is the ordinal of
// the pod whose host it is, -1 for the client (and the switch). It is what
// the kubelet writes (localhost and the pod's own name) followed by what
// cluster DNS would answer: each other pod's name, the headless Service's
// name once per pod, and on the client the client Service's name once per
// pod.
func (d *Deployment) HostsFile(self int) string {
	w := d.Workload
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (test/hosts).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	addr := func(j int) netip.Addr {
		if j == self {
			return d.Pods[j].Host.Addr()
		}
		return d.DelayAddr(j)
	}
	if self >= 0 {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", addr(self), w.PodFQDN(self), w.PodName(self))
	}
	b.WriteString("# cluster DNS\n")
	for j := range d.Pods {
		if j != self {
			fmt.Fprintf(&b, "%s\t%s\n", addr(j), w.PodFQDN(j))
		}
	}
	peers := w.ServiceFQDN(w.StatefulSet.Spec.ServiceName)
	for j := range d.Pods {
		fmt.Fprintf(&b, "%s\t%s\n", addr(j), peers)
	}
	if self < 0 {
		if cs, ok := w.ClientService(); ok {
			for j := range d.Pods {
				fmt.Fprintf(&b, "%s\t%s\n", addr(j), w.ServiceFQDN(cs.Name))
			}
		}
	}
	return b.String()
}

// WriteHostsFiles writes every namespace's hosts file in place.
func (d *Deployment) WriteHostsFiles() error {
	var errs []error
	for i, p := range d.Pods {
		errs = append(errs, p.Host.WriteEtc("hosts", d.HostsFile(i)))
	}
	errs = append(errs, d.Net.Client.WriteEtc("hosts", d.HostsFile(-1)))
	errs = append(errs, d.Net.Switch.WriteEtc("hosts", d.HostsFile(-1)))
	return errors.Join(errs...)
}

// ParseHosts returns the addresses of each name in a hosts file, in the
// order listed.
func ParseHosts(content string) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		for _, name := range f[1:] {
			if !slices.Contains(out[name], a) {
				out[name] = append(out[name], a)
			}
		}
	}
	return out
}

// dialFromClient connects from the client host, resolving a name with the
// client's hosts file as the test wrote it. A name of several addresses
// (a Service) is tried in random order, the first that accepts winning,
// as kube-proxy picks a Service's endpoint per connection.
func (d *Deployment) dialFromClient(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs = slices.Clone(ParseHosts(d.HostsFile(-1))[host])
		if len(addrs) == 0 {
			return nil, &net.DNSError{Err: "no such host in the client's hosts file", Name: host, IsNotFound: true}
		}
		rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.Net.Client.DialContext(ctx, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// ServiceAddr is host:port of the client Service.
func (d *Deployment) ServiceAddr() string {
	cs, _ := d.Workload.ClientService()
	port, _ := d.Workload.ClientPort()
	return net.JoinHostPort(d.Workload.ServiceFQDN(cs.Name), strconv.Itoa(port))
}

// PodAddr is host:port of pod i's HTTP listener under its DNS name.
func (d *Deployment) PodAddr(i int) string {
	return net.JoinHostPort(d.Workload.PodFQDN(i), strconv.Itoa(d.httpPort))
}

// PodIPAddr is host:port of pod i's HTTP listener at its own address A_i
// (no proxy), where the kubelet probes it.
func (d *Deployment) PodIPAddr(i int) string {
	return netip.AddrPortFrom(d.Pods[i].Host.Addr(), uint16(d.httpPort)).String()
}

// Do sends one request from the client host to addr (host:port) and reads
// the whole answer, over HTTPS checked against Options.CAFile when the API
// serves TLS. body, when not nil, is sent as JSON; header adds headers.
func (d *Deployment) Do(ctx context.Context, method, addr, path string, body any, header http.Header) (*harness.Response, error) {
	return d.do(ctx, d.client, method, addr, path, body, header)
}

func (d *Deployment) do(ctx context.Context, client *http.Client, method, addr, path string, body any, header http.Header) (*harness.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.scheme+"://"+addr+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s%s: read the answer: %w", method, addr, path, err)
	}
	return &harness.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Status is GET /cluster/status of pod i (through its DNS name).
func (d *Deployment) Status(ctx context.Context, i int, hash bool) (harness.Status, error) {
	path := "/cluster/status"
	if hash {
		path += "?hash=true"
	}
	var s harness.Status
	r, err := d.Do(ctx, http.MethodGet, d.PodAddr(i), path, nil, nil)
	if err != nil {
		return s, err
	}
	if r.Status != http.StatusOK {
		return s, fmt.Errorf("status of %s: %s", d.Pods[i].Name, r)
	}
	return s, r.Decode(&s)
}

// Ready reports whether pod i's readiness probe passes: GET of the probe's
// path on the pod's own address with the probe's scheme, as the kubelet
// probes it (HTTPS without checking the certificate).
func (d *Deployment) Ready(ctx context.Context, i int) error {
	r, err := d.do(ctx, d.probe, http.MethodGet, d.PodIPAddr(i), d.Workload.ReadinessPath(), nil, nil)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("%s not ready: %s", d.Pods[i].Name, r)
	}
	return nil
}

// Proxies returns pod i's proxies.
func (d *Deployment) Proxies(i int) []*Proxy {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.proxies[i])
}

// podExited marks pod i's proxies down: its host refuses connections now.
func (d *Deployment) podExited(i int) {
	for _, p := range d.Proxies(i) {
		p.MarkDown()
	}
}

// StartAll starts every pod at once, in random order, as the StatefulSet
// controller does with podManagementPolicy Parallel.
func (d *Deployment) StartAll() error {
	order := rand.Perm(len(d.Pods))
	errs := make([]error, len(d.Pods))
	var wg sync.WaitGroup
	for _, i := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.Pods[i].Start()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// CheckPods reports a pod that exited without the test stopping it.
func (d *Deployment) CheckPods() error {
	var errs []error
	for _, p := range d.Pods {
		if err := p.Unexpected(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close kills every pod and closes the proxies; the namespaces stay until
// the test's cleanup. It may be called more than once.
func (d *Deployment) Close() {
	d.closeOnce.Do(d.close)
}

func (d *Deployment) close() {
	var wg sync.WaitGroup
	for _, p := range d.Pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.Kill()
		}()
	}
	wg.Wait()
	d.spawn.close()
	d.client.CloseIdleConnections()
	d.probe.CloseIdleConnections()
	d.mu.Lock()
	for _, ps := range d.proxies {
		for _, p := range ps {
			p.Close()
		}
	}
	d.mu.Unlock()
}

// podScript runs as `sh -c podScript sh HOSTNAME BINARY COMMAND RO PRIVS
// SCRATCH N SRC1 DST1 RO1 ... SRCN DSTN ROn ARGV...` in the pod's new mount
// and UTS namespaces: it names the host, mounts a tmpfs over the command's
// directory with the binary bind-mounted as the command, bind-mounts each
// volume at its mount path, read-only when its ROi is 1, and makes the root
// file system read-only in this mount namespace when RO is 1
// (readOnlyRootFilesystem; the volumes and /dev, /proc, /sys, /etc/hosts
// stay as they are), and execs ARGV with exactly the environment it was
// given, through setpriv(1) with PRIVS (the securityContext's user, groups
// and privileges) when PRIVS is not empty.
//
// The machine's directories are never written. A mount path whose parent
// exists but not itself (/var/lib/holdfast) gets a tmpfs over the parent. One
// whose parent does not exist either (/etc/holdfast/tls) gets an overlay
// over its deepest existing ancestor (/etc), its upper layer on a tmpfs at
// SCRATCH, so the ancestor's files stay visible and the directories are
// made in the overlay; the mounts under the ancestor (the hosts files `ip
// netns exec` bind-mounted over /etc/hosts, ...) are moved back on top of
// it. With RO, those covering mounts are made read-only too.
const podScript = `set -e
echo "$1" > /proc/sys/kernel/hostname
bin=$2 cmd=$3 ro=$4 privs=$5 scratch=$6 n=$7
shift 7
mount -t tmpfs -o mode=0755 tmpfs "${cmd%/*}"
: > "$cmd"
mount --bind "$bin" "$cmd"
covered= layers=0
cover() {
	case " $covered " in
	*" $1 "*) return ;;
	esac
	covered="$covered $1"
	if [ "$2" = tmpfs ]; then
		mount -t tmpfs -o mode=0755 tmpfs "$1"
		return
	fi
	if [ "$layers" = 0 ]; then
		mount -t tmpfs -o mode=0700 tmpfs "$scratch"
	fi
	layers=$((layers + 1))
	s=$scratch/$layers
	mkdir -p "$s/upper" "$s/work" "$s/keep"
	kept= j=0
	for m in $(awk -v a="$1/" 'index($5, a) == 1 { print $5 }' /proc/self/mountinfo); do
		under=
		for k in $kept; do
			case $m in "$k"/*) under=1 ;; esac
		done
		[ -z "$under" ] || continue
		j=$((j + 1))
		if [ -d "$m" ]; then mkdir "$s/keep/$j"; else : > "$s/keep/$j"; fi
		mount --rbind "$m" "$s/keep/$j"
		kept="$kept $m"
	done
	mount -t overlay overlay -o "lowerdir=$1,upperdir=$s/upper,workdir=$s/work" "$1"
	j=0
	for m in $kept; do
		j=$((j + 1))
		mount --move "$s/keep/$j" "$m"
	done
}
while [ "$n" -gt 0 ]; do
	src=$1 dst=$2 volro=$3
	shift 3
	n=$((n - 1))
	if [ ! -d "$dst" ]; then
		if [ -d "${dst%/*}" ]; then
			cover "${dst%/*}" tmpfs
		else
			a=${dst%/*}
			while [ -n "$a" ] && [ ! -d "$a" ]; do a=${a%/*}; done
			if [ -z "$a" ]; then
				echo "test/hosts: no directory to cover for $dst" >&2
				exit 1
			fi
			cover "$a" overlay
		fi
		mkdir -p "$dst"
	fi
	mount --bind "$src" "$dst"
	if [ "$volro" = 1 ]; then
		mount -o remount,bind,ro "$dst"
	fi
done
if [ "$ro" = 1 ]; then
	for c in $covered; do
		mount -o remount,ro "$c"
	done
	mount -o remount,bind,ro /
fi
unset PWD
if [ -n "$privs" ]; then
	exec setpriv $privs -- "$@"
fi
exec "$@"
`

// Identity is the user, groups and privileges a pod's process runs with,
// from the pod's and the container's securityContext as the kubelet
// applies them: runAsUser and runAsGroup (the container's over the pod's;
// 0 when neither sets one, an image's default user being unknown here),
// fsGroup and supplementalGroups as supplementary groups,
// allowPrivilegeEscalation false as no_new_privs, capabilities dropped,
// and readOnlyRootFilesystem.
type Identity struct {
	UID, GID          int64
	Groups            []int64
	NoNewPrivs        bool
	DropAll           bool
	ReadOnlyRoot      bool
	FSGroup           *int64
	FSGroupChangeRoot bool // fsGroupChangePolicy OnRootMismatch
}

// Identity computes the pod's Identity, refusing what the kubelet refuses
// (runAsNonRoot with user 0).
func (w *Workload) Identity() (Identity, error) {
	var id Identity
	ps := w.StatefulSet.Spec.Template.Spec.SecurityContext
	cs := w.Container().SecurityContext
	nonRoot := false
	if ps != nil {
		if ps.RunAsUser != nil {
			id.UID = *ps.RunAsUser
		}
		if ps.RunAsGroup != nil {
			id.GID = *ps.RunAsGroup
		}
		if ps.RunAsNonRoot != nil {
			nonRoot = *ps.RunAsNonRoot
		}
		if ps.FSGroup != nil {
			id.FSGroup = ps.FSGroup
			id.Groups = append(id.Groups, *ps.FSGroup)
		}
		id.Groups = append(id.Groups, ps.SupplementalGroups...)
		id.FSGroupChangeRoot = ps.FSGroupChangePolicy != nil && *ps.FSGroupChangePolicy == corev1.FSGroupChangeOnRootMismatch
	}
	if cs != nil {
		if cs.RunAsUser != nil {
			id.UID = *cs.RunAsUser
		}
		if cs.RunAsGroup != nil {
			id.GID = *cs.RunAsGroup
		}
		if cs.RunAsNonRoot != nil {
			nonRoot = *cs.RunAsNonRoot
		}
		id.NoNewPrivs = cs.AllowPrivilegeEscalation != nil && !*cs.AllowPrivilegeEscalation
		id.ReadOnlyRoot = cs.ReadOnlyRootFilesystem != nil && *cs.ReadOnlyRootFilesystem
		if cs.Capabilities != nil && slices.Contains(cs.Capabilities.Drop, "ALL") {
			id.DropAll = true
		}
	}
	if nonRoot && id.UID == 0 {
		return id, errors.New("runAsNonRoot with user 0 (or no runAsUser): the kubelet would refuse to start the container")
	}
	slices.Sort(id.Groups)
	id.Groups = slices.Compact(id.Groups)
	return id, nil
}

// setpriv is the PRIVS argument of podScript.
func (id Identity) setpriv() string {
	if id.UID == 0 && id.GID == 0 && len(id.Groups) == 0 && !id.NoNewPrivs && !id.DropAll {
		return ""
	}
	a := []string{fmt.Sprintf("--reuid=%d", id.UID), fmt.Sprintf("--regid=%d", id.GID)}
	if len(id.Groups) == 0 {
		a = append(a, "--clear-groups")
	} else {
		var gs []string
		for _, g := range id.Groups {
			gs = append(gs, strconv.FormatInt(g, 10))
		}
		a = append(a, "--groups="+strings.Join(gs, ","))
	}
	if id.NoNewPrivs {
		a = append(a, "--no-new-privs")
	}
	if id.DropAll {
		a = append(a, "--inh-caps=-all", "--bounding-set=-all")
	}
	return strings.Join(a, " ")
}

// setVolumeOwnership gives a volume to the fsGroup as the kubelet does
// before mounting it (pkg/volume SetVolumeOwnership): every file's group
// becomes fsGroup and gains group read and write (read only, for a volume
// the kubelet mounts read-only, as a Secret's), every directory also
// group search and the setgid bit; with OnRootMismatch (which the kubelet
// applies to a claim's volume, not to a Secret's) it is skipped when the
// volume's top directory already has them.
func (id Identity) setVolumeOwnership(dir string, readOnly bool) error {
	if id.FSGroup == nil {
		return nil
	}
	gid := int(*id.FSGroup)
	if id.FSGroupChangeRoot && !readOnly {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok && int(st.Gid) == gid && fi.Mode().Perm()&0o770 == 0o770 && fi.Mode()&os.ModeSetgid != 0 {
			return nil
		}
	}
	return filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, -1, gid); err != nil {
			return err
		}
		if e.Type()&os.ModeSymlink != 0 {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		mask := os.FileMode(0o660)
		if readOnly {
			mask = 0o440
		}
		if fi.IsDir() {
			mask |= os.ModeSetgid | 0o110
		}
		return os.Chmod(path, fi.Mode()|mask)
	})
}

// spawner starts processes from one OS thread that lives until close.
// The kernel sends a process's parent-death signal when the thread that
// forked it ends, not the process; Go ends a thread when a goroutine that
// locked it returns (as InNamespace's do), and any thread may once have
// run a goroutine that forked. A pod forked from a thread of its own,
// locked by the spawner, is killed only when the test process dies.
type spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for r := range s.reqs {
			r.err <- r.cmd.Start()
		}
	}()
	return s
}

// start starts cmd (whose stdout and stderr are files or nil: no copying
// goroutine is started on the spawner's thread).
func (s *spawner) start(cmd *exec.Cmd) error {
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	s.reqs <- r
	return <-r.err
}

// close ends the spawner once every process it started is gone.
func (s *spawner) close() { close(s.reqs) }

// Pod is one pod of the StatefulSet: its host, its volumes (directories
// under Dir kept across restarts, like PersistentVolumeClaims) and its
// process.
type Pod struct {
	// Index is the pod's ordinal; Name is <statefulset>-<ordinal>.
	Index int
	Name  string
	// Host is the pod's network namespace.
	Host *Namespace
	// Dir holds the pod's volumes and LogPath, its stdout and stderr
	// across starts.
	Dir     string
	LogPath string

	d *Deployment

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	exit     string
	expected bool
	starts   int
	env      PodEnvironment
}

// VolumeDir is the directory that backs the volume of that name.
func (p *Pod) VolumeDir(name string) string { return filepath.Join(p.Dir, "volumes", name) }

// scratchDir is where podScript mounts the tmpfs of its overlays' upper
// layers (in the pod's mount namespace: the directory stays empty).
func (p *Pod) scratchDir() string { return filepath.Join(p.Dir, "scratch") }

// prepareVolume readies the directory that backs volume mount m: a
// claim's volume (volumeClaimTemplates) is kept across starts and given to
// the fsGroup; a Secret's is laid out afresh from Options.Secrets as the
// kubelet's secret volume (see writeSecretVolume). It reports whether the
// kubelet mounts it read-only.
func (p *Pod) prepareVolume(m corev1.VolumeMount, id Identity) (readOnly bool, err error) {
	kind, v, err := p.d.Workload.VolumeOf(m.Name)
	if err != nil {
		return false, err
	}
	dir := p.VolumeDir(m.Name)
	if kind == claimVolume {
		return m.ReadOnly, id.setVolumeOwnership(dir, false)
	}
	data, ok := p.d.opts.Secrets[v.Secret.SecretName]
	if !ok && (v.Secret.Optional == nil || !*v.Secret.Optional) {
		return false, fmt.Errorf("the volume %s: no Secret %q (Options.Secrets)", m.Name, v.Secret.SecretName)
	}
	mode := os.FileMode(corev1.SecretVolumeSourceDefaultMode)
	if v.Secret.DefaultMode != nil {
		mode = os.FileMode(*v.Secret.DefaultMode)
	}
	if err := writeSecretVolume(dir, data, mode); err != nil {
		return false, fmt.Errorf("the volume %s: %w", m.Name, err)
	}
	// A Secret's volume is read-only to the kubelet: its files get group
	// read, not write, whatever the mount says.
	if err := id.setVolumeOwnership(dir, true); err != nil {
		return false, fmt.Errorf("the volume %s: %w", m.Name, err)
	}
	return true, nil
}

// writeSecretVolume lays a Secret's keys out in dir as the kubelet's
// secret volume does (its AtomicWriter): the files in a directory
// ..<timestamp>, a symlink ..data to it, and per key a symlink KEY →
// ..data/KEY; each file of mode mode (the volume's defaultMode, as the
// kubelet sets it), owned by root. What dir held before is removed.
func writeSecretVolume(dir string, data map[string][]byte, mode os.FileMode) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	ts := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	if err := os.MkdirAll(filepath.Join(dir, ts), 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(data)) {
		if strings.ContainsRune(k, '/') || strings.HasPrefix(k, "..") {
			return fmt.Errorf("key %q is not a file name", k)
		}
		f := filepath.Join(dir, ts, k)
		if err := os.WriteFile(f, data[k], 0o600); err != nil {
			return err
		}
		if err := os.Chmod(f, mode); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			return err
		}
	}
	return os.Symlink(ts, filepath.Join(dir, "..data"))
}

// Environment is what the pod's process runs with: the kubelet's view of
// the manifest for this pod.
func (p *Pod) Environment() (PodEnvironment, error) {
	w := p.d.Workload
	ips := map[string]string{"kubernetes": "10.96.0.1"}
	for i, s := range w.Services {
		ips[s.Name] = fmt.Sprintf("10.96.0.%d", 10+i)
	}
	env, err := w.PodEnv(p.Index, ips, func(name, key string) (string, bool) {
		if s, ok := p.d.opts.Secrets[name]; ok {
			v, ok := s[key]
			return string(v), ok
		}
		return p.d.Key, true
	})
	if err != nil {
		return env, err
	}
	env.Argv = append(env.Argv, p.d.opts.ExtraArgs...)
	return env, nil
}

// Start starts the pod's process; it returns once it is started, not once
// it serves.
func (p *Pod) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isDone(p.done) {
		return fmt.Errorf("start %s: already running", p.Name)
	}
	env, err := p.Environment()
	if err != nil {
		return err
	}
	id, err := p.d.Workload.Identity()
	if err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	ro := "0"
	if id.ReadOnlyRoot {
		ro = "1"
	}
	c := p.d.Workload.Container()
	if c.WorkingDir != "" {
		return fmt.Errorf("start %s: the container's workingDir %q is not supported", p.Name, c.WorkingDir)
	}
	args := []string{"netns", "exec", p.Host.Name, "unshare", "--mount", "--uts", "sh", "-c", podScript, "sh",
		p.Name, p.d.opts.Binary, env.Argv[0], ro, id.setpriv(), p.scratchDir(), strconv.Itoa(len(c.VolumeMounts))}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			return fmt.Errorf("start %s: the volume mount %s has a subPath, which the test does not mount", p.Name, m.Name)
		}
		volRO, err := p.prepareVolume(m, id)
		if err != nil {
			return fmt.Errorf("start %s: %w", p.Name, err)
		}
		args = append(args, p.VolumeDir(m.Name), m.MountPath, map[bool]string{false: "0", true: "1"}[volRO])
	}
	args = append(args, env.Argv...)
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	p.starts++
	fmt.Fprintf(f, "=== test/hosts: start #%d of %s on %s (%s) at %s\n", p.starts, p.Name, p.Host.Name, p.Host.Addr(), time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command("ip", args...)
	cmd.Env = env.Env
	cmd.Dir = "/" // an image's default working directory
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group (a ^C to go test does not reach it), killed by
	// the kernel if the test process dies without its cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.d.spawn.start(cmd); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exit, p.expected, p.env = cmd, done, "", false, env
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if cmd.ProcessState != nil {
			p.exit = cmd.ProcessState.String()
		} else {
			p.exit = err.Error()
		}
		p.mu.Unlock()
		close(done)
		p.d.podExited(p.Index)
	}()
	return nil
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Running reports whether the pod's process is alive.
func (p *Pod) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isDone(p.done)
}

// Pid is the pod's process id (0 before the first start).
func (p *Pod) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Unexpected reports the pod's process having exited without Stop or
// Kill.
func (p *Pod) Unexpected() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !isDone(p.done) || p.expected {
		return nil
	}
	return fmt.Errorf("%w: %s exited on its own (%s); last lines of its stderr:\n%s", harness.ErrPermanent, p.Name, p.exit, tail(p.LogPath, 30))
}

// signal sends sig to the running process and returns its done channel.
func (p *Pod) signal(sig syscall.Signal) (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isDone(p.done) {
		return nil, nil
	}
	p.expected = true
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return nil, err
	}
	return p.done, nil
}

// Stop stops the pod as the kubelet does: SIGTERM, then SIGKILL once the
// termination grace period (the manifest's, default 30 s) has passed. It
// returns how the process ended and an error if it had to be killed.
func (p *Pod) Stop() (string, error) {
	grace := 30 * time.Second
	if g := p.d.Workload.StatefulSet.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	done, err := p.signal(syscall.SIGTERM)
	if err != nil || done == nil {
		return "", err
	}
	select {
	case <-done:
		return p.Exit(), nil
	case <-time.After(grace):
	}
	_ = p.Kill()
	return p.Exit(), fmt.Errorf("%s did not exit within %v of SIGTERM: killed", p.Name, grace)
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Pod) Kill() error {
	done, err := p.signal(syscall.SIGKILL)
	if err != nil || done == nil {
		return err
	}
	<-done
	return nil
}

// Exit describes how the last process ended ("" while it runs).
func (p *Pod) Exit() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Wipe empties the pod's claims' volumes (it must not be running), as a
// new PersistentVolume would be.
func (p *Pod) Wipe() error {
	if p.Running() {
		return fmt.Errorf("wipe %s: it is running", p.Name)
	}
	for _, m := range p.d.Workload.Container().VolumeMounts {
		if kind, _, err := p.d.Workload.VolumeOf(m.Name); err != nil || kind != claimVolume {
			continue
		}
		dir := p.VolumeDir(m.Name)
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckProcess verifies that the running process is the container's
// command with exactly the pod's argv and environment (read from
// /proc/PID/cmdline and /proc/PID/environ once the wrapper has exec'd
// it).
func (p *Pod) CheckProcess() error {
	p.mu.Lock()
	pid, want, done := 0, p.env, p.done
	if p.cmd != nil {
		pid = p.cmd.Process.Pid
	}
	p.mu.Unlock()
	if pid == 0 || isDone(done) {
		return fmt.Errorf("%w: %s is not running", harness.ErrPermanent, p.Name)
	}
	read := func(name string) ([]string, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			return nil, err
		}
		return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), nil
	}
	argv, err := read("cmdline")
	if err != nil {
		return err
	}
	if len(argv) == 0 || argv[0] != want.Argv[0] {
		return fmt.Errorf("%s has not exec'd %s yet (argv %q)", p.Name, want.Argv[0], argv)
	}
	if !slices.Equal(argv, want.Argv) {
		return fmt.Errorf("%w: %s runs %q, want %q", harness.ErrPermanent, p.Name, argv, want.Argv)
	}
	env, err := read("environ")
	if err != nil {
		return err
	}
	if err := checkIdentity(pid, p.d.Workload); err != nil {
		return fmt.Errorf("%w: %s: %w", harness.ErrPermanent, p.Name, err)
	}
	if err := checkMounts(pid, p.d.Workload); err != nil {
		return fmt.Errorf("%w: %s: %w", harness.ErrPermanent, p.Name, err)
	}
	got, exp := slices.Sorted(slices.Values(env)), slices.Sorted(slices.Values(want.Env))
	if !slices.Equal(got, exp) {
		return fmt.Errorf("%w: %s's environment differs from the pod's:\ngot  %q\nwant %q", harness.ErrPermanent, p.Name, redact(got, p.d.Key), redact(exp, p.d.Key))
	}
	return nil
}

// checkIdentity compares the user, groups and no_new_privs of the process
// with the pod's Identity.
func checkIdentity(pid int, w *Workload) error {
	id, err := w.Identity()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	var groups []string
	for _, g := range id.Groups {
		groups = append(groups, strconv.FormatInt(g, 10))
	}
	u, g := strconv.FormatInt(id.UID, 10), strconv.FormatInt(id.GID, 10)
	want := map[string]string{
		"Uid":    strings.Join([]string{u, u, u, u}, " "),
		"Gid":    strings.Join([]string{g, g, g, g}, " "),
		"Groups": strings.Join(groups, " "),
	}
	if id.NoNewPrivs {
		want["NoNewPrivs"] = "1"
	}
	if id.DropAll {
		want["CapBnd"] = "0000000000000000"
	}
	if id.UID != 0 {
		want["CapEff"] = "0000000000000000"
	}
	for k, v := range want {
		if fields[k] != v {
			return fmt.Errorf("/proc/%d/status has %s %q, want %q", pid, k, fields[k], v)
		}
	}
	return nil
}

// checkMounts verifies the process's view of the file system: the command
// and each volume mounted where the container has them, writable unless
// read-only, and the root read-only when readOnlyRootFilesystem says so.
func checkMounts(pid int, w *Workload) error {
	id, err := w.Identity()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return err
	}
	opts := map[string]string{} // mount point → per-mount options (the last mount wins)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			opts[f[4]] = f[5]
		}
	}
	ro := func(point string) (bool, error) {
		o, ok := opts[point]
		if !ok {
			return false, fmt.Errorf("nothing is mounted at %s", point)
		}
		return slices.Contains(strings.Split(o, ","), "ro"), nil
	}
	c := w.Container()
	want := map[string]bool{"/": id.ReadOnlyRoot, c.Command[0]: false}
	for _, m := range c.VolumeMounts {
		want[m.MountPath] = m.ReadOnly
	}
	for point, wantRO := range want {
		got, err := ro(point)
		if err != nil {
			return err
		}
		if got != wantRO {
			return fmt.Errorf("%s is mounted read-only=%v, want %v", point, got, wantRO)
		}
	}
	return nil
}

func redact(env []string, secret string) []string {
	out := slices.Clone(env)
	for i, kv := range out {
		out[i] = strings.ReplaceAll(kv, secret, "<cluster key>")
	}
	return out
}

// Tail returns the last n lines of the pod's log.
func (p *Pod) Tail(n int) string { return tail(p.LogPath, n) }

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Workload is what `holdfast deploy kubernetes` printed: the StatefulSet
// and the Services, with the container that runs holdfast.
type Workload struct {
	// YAML is the command's output as printed.
	YAML []byte
	// StatefulSet is the one StatefulSet of the output.
	StatefulSet appsv1.StatefulSet
	// Services are the output's Services.
	Services []corev1.Service
	// Kinds lists the kind of every document, in order.
	Kinds []string
}

// LoadWorkload runs `binary deploy kubernetes --image x --replicas N
// [extra...]` and decodes its output.
func LoadWorkload(ctx context.Context, binary string, replicas int, extra ...string) (*Workload, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := append([]string{"deploy", "kubernetes", "--image", "x", "--replicas", strconv.Itoa(replicas)}, extra...)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("holdfast %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	w, err := ParseWorkload(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("the output of holdfast deploy kubernetes: %w", err)
	}
	return w, nil
}

// ParseWorkload decodes a multi-document YAML manifest into the
// Kubernetes API's types, as strictly as the API server's field
// validation: an unknown or duplicate field, or a value of the wrong type,
// is an error.
func ParseWorkload(manifest []byte) (*Workload, error) {
	w := &Workload{YAML: manifest}
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	sets := 0
	for i := 0; ; i++ {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(js)) == 0 || string(bytes.TrimSpace(js)) == "null" {
			continue // comments only, or an empty document
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(js, &head); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		w.Kinds = append(w.Kinds, head.Kind)
		switch head.Kind {
		case "StatefulSet":
			sets++
			if err := decodeStrict(js, &w.StatefulSet); err != nil {
				return nil, fmt.Errorf("the StatefulSet: %w", err)
			}
		case "Service":
			var s corev1.Service
			if err := decodeStrict(js, &s); err != nil {
				return nil, fmt.Errorf("a Service: %w", err)
			}
			w.Services = append(w.Services, s)
		}
	}
	if sets != 1 {
		return nil, fmt.Errorf("want one StatefulSet, found %d (kinds: %s)", sets, strings.Join(w.Kinds, ", "))
	}
	if len(w.StatefulSet.Spec.Template.Spec.Containers) != 1 {
		return nil, fmt.Errorf("want one container in the StatefulSet's pod, found %d", len(w.StatefulSet.Spec.Template.Spec.Containers))
	}
	return w, nil
}

// decodeStrict decodes JSON into out as the API server's strict field
// validation does.
func decodeStrict(js []byte, out any) error {
	strict, err := kjson.UnmarshalStrict(js, out)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// Container is the pod's container.
func (w *Workload) Container() corev1.Container {
	return w.StatefulSet.Spec.Template.Spec.Containers[0]
}

// Namespace is the StatefulSet's namespace ("default" when unset).
func (w *Workload) Namespace() string {
	if ns := w.StatefulSet.Namespace; ns != "" {
		return ns
	}
	return "default"
}

// Name is the StatefulSet's name; its pods are Name-0, Name-1, ...
func (w *Workload) Name() string { return w.StatefulSet.Name }

// PodName is the name of the pod of ordinal i.
func (w *Workload) PodName(i int) string { return fmt.Sprintf("%s-%d", w.Name(), i) }

// Service returns the Service of that name.
func (w *Workload) Service(name string) (corev1.Service, bool) {
	for _, s := range w.Services {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.Service{}, false
}

// ClientService is the Service with a cluster IP (not headless) that
// selects the pods: the one clients use.
func (w *Workload) ClientService() (corev1.Service, bool) {
	for _, s := range w.Services {
		if s.Spec.ClusterIP != corev1.ClusterIPNone && s.Name != w.StatefulSet.Spec.ServiceName {
			return s, true
		}
	}
	return corev1.Service{}, false
}

// ClusterDomain is the cluster's DNS domain the names are made in.
const ClusterDomain = "cluster.local"

// ServiceFQDN is a Service's name in cluster DNS.
func (w *Workload) ServiceFQDN(service string) string {
	return service + "." + w.Namespace() + ".svc." + ClusterDomain
}

// PodFQDN is the DNS name of the pod of ordinal i under the headless
// Service (hostname.subdomain.namespace.svc.cluster.local).
func (w *Workload) PodFQDN(i int) string {
	return w.PodName(i) + "." + w.ServiceFQDN(w.StatefulSet.Spec.ServiceName)
}

// Check verifies what running the StatefulSet relies on, with the reason
// for each rule in its error: the pods start in parallel (OrderedReady
// would start holdfast-1 only once holdfast-0 is ready, which it never is
// before the cluster formed with the others), the headless Service
// publishes pods that are not ready (the nodes find each other through it
// before any is ready), and the probe is an HTTP GET.
func (w *Workload) Check(replicas int) error {
	var errs []error
	s := w.StatefulSet.Spec
	if s.Replicas == nil || int(*s.Replicas) != replicas {
		errs = append(errs, fmt.Errorf("spec.replicas is %v, want %d", s.Replicas, replicas))
	}
	if s.PodManagementPolicy != appsv1.ParallelPodManagement {
		errs = append(errs, fmt.Errorf("spec.podManagementPolicy is %q, want Parallel: with OrderedReady the controller starts pod 1 only when pod 0 is ready, and no pod is ready before the cluster has formed", s.PodManagementPolicy))
	}
	peers, ok := w.Service(s.ServiceName)
	switch {
	case s.ServiceName == "":
		errs = append(errs, errors.New("spec.serviceName is empty: the pods have no DNS names"))
	case !ok:
		errs = append(errs, fmt.Errorf("no Service %q (spec.serviceName) in the output", s.ServiceName))
	case peers.Spec.ClusterIP != corev1.ClusterIPNone:
		errs = append(errs, fmt.Errorf("the Service %q is not headless (clusterIP %q)", s.ServiceName, peers.Spec.ClusterIP))
	case !peers.Spec.PublishNotReadyAddresses:
		errs = append(errs, fmt.Errorf("the headless Service %q lacks publishNotReadyAddresses: true: its DNS name would list no pod before one is ready, and none is ready before they found each other through it", s.ServiceName))
	}
	if _, ok := w.ClientService(); !ok {
		errs = append(errs, errors.New("no client Service (one with a cluster IP)"))
	}
	c := w.Container()
	if len(c.Command) == 0 {
		errs = append(errs, errors.New("the container has no command"))
	}
	for _, m := range c.VolumeMounts {
		if _, _, err := w.VolumeOf(m.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		errs = append(errs, errors.New("the container has no HTTP readiness probe"))
	} else if _, err := w.ReadinessPort(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ReadinessPort is the port of the readiness probe (resolving a named
// port).
func (w *Workload) ReadinessPort() (int, error) {
	c := w.Container()
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		return 0, errors.New("no HTTP readiness probe")
	}
	return w.portOf(c.ReadinessProbe.HTTPGet.Port)
}

// ReadinessScheme is the readiness probe's scheme (HTTP when unset).
func (w *Workload) ReadinessScheme() corev1.URIScheme {
	c := w.Container()
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Scheme == "" {
		return corev1.URISchemeHTTP
	}
	return c.ReadinessProbe.HTTPGet.Scheme
}

// The kinds of volume a pod's volume mount can be backed by.
const (
	claimVolume  = "claim"  // a volumeClaimTemplate: a PersistentVolumeClaim per pod
	secretVolume = "secret" // a pod volume of a Secret
)

// VolumeOf says what backs the container's volume mount of that name: a
// volumeClaimTemplate of the StatefulSet, or a volume of the pod's spec,
// which the test runs only when it is a Secret's.
func (w *Workload) VolumeOf(name string) (kind string, v corev1.Volume, err error) {
	for _, c := range w.StatefulSet.Spec.VolumeClaimTemplates {
		if c.Name == name {
			return claimVolume, v, nil
		}
	}
	for _, v := range w.StatefulSet.Spec.Template.Spec.Volumes {
		if v.Name != name {
			continue
		}
		if v.Secret == nil {
			return "", v, fmt.Errorf("the volume %s is not a Secret's or a claim's, which are the ones the test mounts", name)
		}
		if len(v.Secret.Items) > 0 {
			return "", v, fmt.Errorf("the volume %s lists items of its Secret, which the test does not lay out", name)
		}
		return secretVolume, v, nil
	}
	return "", v, fmt.Errorf("the volume mount %s names neither a volumeClaimTemplate nor a pod volume", name)
}

// ReadinessPath is the path of the readiness probe.
func (w *Workload) ReadinessPath() string {
	c := w.Container()
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path == "" {
		return "/"
	}
	return c.ReadinessProbe.HTTPGet.Path
}

func (w *Workload) portOf(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range w.Container().Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %q", p.StrVal)
}

// ClientPort is the port clients use on the client Service's name (its
// first port).
func (w *Workload) ClientPort() (int, error) {
	s, ok := w.ClientService()
	if !ok || len(s.Spec.Ports) == 0 {
		return 0, errors.New("the client Service has no port")
	}
	return int(s.Spec.Ports[0].Port), nil
}

// Expand replaces $(VAR) references in s as the kubelet does
// (k8s.io/kubernetes third_party/forked/golang/expansion): $(NAME) becomes
// the value lookup gives, or stays as written when lookup has none; $$ is
// a literal $; anything else is kept.
func Expand(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	checkpoint := 0
	for cursor := 0; cursor < len(s); cursor++ {
		if s[cursor] != '$' || cursor+1 >= len(s) {
			continue
		}
		b.WriteString(s[checkpoint:cursor])
		read, isVar, advance := readVariable(s[cursor+1:])
		if isVar {
			if v, ok := lookup(read); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + read + ")")
			}
		} else {
			b.WriteString(read)
		}
		cursor += advance
		checkpoint = cursor + 1
	}
	return b.String() + s[checkpoint:]
}

// readVariable reads what follows a $: "$" (an escaped $), "(NAME)" (a
// reference), or anything else (kept with its $).
func readVariable(s string) (read string, isVar bool, advance int) {
	switch s[0] {
	case '$':
		return "$", false, 1
	case '(':
		for i := 1; i < len(s); i++ {
			if s[i] == ')' {
				return s[1:i], true, i + 1
			}
		}
		return "$(", false, 1
	default:
		return "$" + s[:1], false, 1
	}
}

// PodEnvironment is what the kubelet gives the container of one pod: the
// environment (in the order the runtime sets it: the image's, then the
// container's env, then the service links) and the command line with its
// $(VAR) references expanded.
type PodEnvironment struct {
	Env  []string // NAME=value
	Argv []string // command then args
}

// ImagePath is the PATH the test gives the container as its image would
// (a Debian-like image).
const ImagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// PodEnv computes the pod's environment and command line the way the
// kubelet does: service-link variables (unless enableServiceLinks is
// false) for every Service of the namespace with a cluster IP, and the
// "kubernetes" Service (clusterIPs gives each its made-up cluster IP); the
// container's env in order, each value expanded against the variables
// before it and the service links, fieldRef metadata.name and
// metadata.namespace resolved to the pod's name and namespace, and
// secretKeyRef resolved by secret; then command and args expanded against
// the whole environment. The container runtime adds PATH (the image's) and
// HOSTNAME.
func (w *Workload) PodEnv(ordinal int, clusterIPs map[string]string, secret func(name, key string) (string, bool)) (PodEnvironment, error) {
	pod := w.PodName(ordinal)
	c := w.Container()
	var service []string // NAME=value
	serviceVal := map[string]string{}
	if links := w.StatefulSet.Spec.Template.Spec.EnableServiceLinks; links == nil || *links {
		kube := corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
		kube.Name = "kubernetes"
		for _, s := range append([]corev1.Service{kube}, w.Services...) {
			ip, ok := clusterIPs[s.Name]
			if s.Spec.ClusterIP == corev1.ClusterIPNone || !ok {
				continue
			}
			for _, kv := range serviceLinks(s, ip) {
				service = append(service, kv[0]+"="+kv[1])
				serviceVal[kv[0]] = kv[1]
			}
		}
	}
	defined := map[string]string{}
	var env []string
	lookup := func(name string) (string, bool) {
		if v, ok := defined[name]; ok {
			return v, true
		}
		v, ok := serviceVal[name]
		return v, ok
	}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case v != "":
			v = Expand(v, lookup)
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod
			case "metadata.namespace":
				v = w.Namespace()
			default:
				return PodEnvironment{}, fmt.Errorf("env %s: fieldRef %q is not one the test resolves", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := secret(ref.Name, ref.Key)
			if !ok {
				return PodEnvironment{}, fmt.Errorf("env %s: no secret %s key %s", e.Name, ref.Name, ref.Key)
			}
			v = s
		case e.ValueFrom != nil:
			return PodEnvironment{}, fmt.Errorf("env %s: a valueFrom the test does not resolve", e.Name)
		}
		defined[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	out := PodEnvironment{}
	if _, ok := defined["PATH"]; !ok {
		out.Env = append(out.Env, "PATH="+ImagePath)
	}
	out.Env = append(out.Env, "HOSTNAME="+pod)
	out.Env = append(out.Env, env...)
	for _, kv := range service {
		if _, ok := defined[kv[:strings.IndexByte(kv, '=')]]; !ok {
			out.Env = append(out.Env, kv)
		}
	}
	for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
		out.Argv = append(out.Argv, Expand(a, lookup))
	}
	return out, nil
}

// serviceLinks are the docker-link style variables the kubelet makes for a
// Service (k8s.io/kubernetes pkg/kubelet/envvars).
func serviceLinks(s corev1.Service, ip string) [][2]string {
	if len(s.Spec.Ports) == 0 {
		return nil
	}
	name := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
	first := s.Spec.Ports[0]
	out := [][2]string{
		{name + "_SERVICE_HOST", ip},
		{name + "_SERVICE_PORT", strconv.Itoa(int(first.Port))},
	}
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			out = append(out, [2]string{name + "_SERVICE_PORT_" + strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), strconv.Itoa(int(p.Port))})
		}
	}
	for i, p := range s.Spec.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = "TCP"
		}
		url := fmt.Sprintf("%s://%s:%d", strings.ToLower(proto), ip, p.Port)
		if i == 0 {
			out = append(out, [2]string{name + "_PORT", url})
		}
		prefix := fmt.Sprintf("%s_PORT_%d_%s", name, p.Port, strings.ToUpper(proto))
		out = append(out,
			[2]string{prefix, url},
			[2]string{prefix + "_PROTO", strings.ToLower(proto)},
			[2]string{prefix + "_PORT", strconv.Itoa(int(p.Port))},
			[2]string{prefix + "_ADDR", ip},
		)
	}
	return out
}
