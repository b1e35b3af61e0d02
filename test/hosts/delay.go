//go:build linux

package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Delay is the one-way latency a Proxy adds to each direction: Mean ±
// Jitter, uniformly distributed, drawn afresh for every chunk of bytes the
// proxy reads (bytes are never reordered: a chunk is never delivered before
// the one read before it).
type Delay struct {
	Mean, Jitter time.Duration
}

// DefaultDelay is 1 ms ± 0.25 ms each way: a round trip of 2 ms ± 0.5 ms,
// a network between hosts in one zone of a cloud region.
func DefaultDelay() Delay { return Delay{Mean: time.Millisecond, Jitter: 250 * time.Microsecond} }

func (d Delay) sample() time.Duration {
	if d.Jitter <= 0 {
		return d.Mean
	}
	return d.Mean - d.Jitter + time.Duration(rand.Int64N(int64(2*d.Jitter)+1))
}

// String is "1ms±250µs".
func (d Delay) String() string { return fmt.Sprintf("%v±%v", d.Mean, d.Jitter) }

// timer sleeps with the kernel's precision. Go's timers wake in whole
// milliseconds on an idle process (a 1.25 ms sleep takes about 2.2 ms),
// which would double a 1 ms delay. A timerfd's expiry is an event on a
// file the runtime's poller waits for: the goroutine parks as on a socket,
// no thread is held, and it wakes within microseconds of the deadline.
type timer struct {
	fd int
	f  *os.File
}

func newTimer() (*timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	// Non-blocking: os.NewFile registers it with the runtime's poller.
	return &timer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}, nil
}

// sleepUntil returns at t.
func (tm *timer) sleepUntil(t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(tm.fd, 0, &spec, nil); err != nil {
		return fmt.Errorf("timerfd_settime: %w", err)
	}
	var expirations [8]byte
	_, err := io.ReadFull(tm.f, expirations[:])
	return err
}

func (tm *timer) close() { _ = tm.f.Close() }

// Proxy is a TCP forwarder that delays every byte: it listens on Addr in
// one namespace and connects each accepted connection to Target from
// another (or the same), copying both ways with Delay added to each
// direction.
//
// It mirrors whether its target accepts connections: when a connection to
// the target is refused (the pod's process is gone or not listening yet),
// or MarkDown is called, it stops listening, so a client dialling it is
// refused at once, as it would be by the pod's host; it probes the target
// every 50 ms and listens again once the target accepts. A target that
// does not answer at all (its host cut off) leaves the accepted client
// connection silent until the dial gives up (20 s), as a dropped SYN
// would.
type Proxy struct {
	// Addr is where the proxy listens (ip:port), Target where it
	// connects.
	Addr, Target string
	// Delay is added to each direction.
	Delay Delay

	listenNS, dialNS *Namespace

	pool sync.Pool // of *[]byte read buffers

	mu      sync.Mutex
	ln      net.Listener // nil while down
	conns   map[net.Conn]struct{}
	probing bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// NewProxy starts a proxy listening on addr in listenNS and forwarding to
// target from dialNS. It starts down, probing its target, unless the
// target already accepts connections.
func NewProxy(listenNS *Namespace, addr string, dialNS *Namespace, target string, d Delay) (*Proxy, error) {
	if err := listenNS.net.checkAddr(addr); err != nil {
		return nil, err
	}
	if err := dialNS.net.checkAddr(target); err != nil {
		return nil, err
	}
	p := &Proxy{Addr: addr, Target: target, Delay: d, listenNS: listenNS, dialNS: dialNS,
		conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	p.pool.New = func() any { b := make([]byte, 32<<10); return &b }
	p.mu.Lock()
	defer p.mu.Unlock()
	p.startProbeLocked()
	return p, nil
}

// Up reports whether the proxy is listening.
func (p *Proxy) Up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ln != nil
}

// MarkDown stops listening and closes every connection, as when the
// target's process is known to be gone; the proxy listens again once the
// target accepts connections.
func (p *Proxy) MarkDown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.downLocked()
}

func (p *Proxy) downLocked() {
	if p.closed {
		return
	}
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	p.startProbeLocked()
}

func (p *Proxy) startProbeLocked() {
	if p.probing || p.closed {
		return
	}
	p.probing = true
	p.wg.Add(1)
	go p.probe()
}

// probe dials the target every 50 ms until it accepts a connection, then
// listens. It runs on one thread in the dialling namespace for the whole
// time it probes.
func (p *Proxy) probe() {
	defer p.wg.Done()
	_ = InNamespace(p.dialNS.Path(), func() error {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		d := net.Dialer{Timeout: 500 * time.Millisecond}
		for {
			if c, err := d.Dial("tcp4", p.Target); err == nil {
				_ = c.Close()
				if p.listen() {
					return nil
				}
			}
			select {
			case <-p.stop:
				p.mu.Lock()
				p.probing = false
				p.mu.Unlock()
				return nil
			case <-tick.C:
			}
		}
	})
}

// listen starts listening after a successful probe; false means try again.
func (p *Proxy) listen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.probing = false
		return true
	}
	ln, err := p.listenNS.Listen(p.Addr)
	if err != nil {
		return false
	}
	p.ln = ln
	p.probing = false
	p.wg.Add(1)
	go p.accept(ln)
	return true
}

// Close stops the proxy and every connection through it and waits for its
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed (down or Close)
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(ln, c)
		}()
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

// forward connects c to the target and copies both ways with the delay.
func (p *Proxy) forward(ln net.Listener, c net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	up, err := p.dialNS.DialContext(ctx, p.Target)
	cancel()
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			// The target's host answers but nothing listens: from now on
			// refuse as it does, until it listens again.
			p.mu.Lock()
			if p.ln == ln {
				p.downLocked()
			}
			p.mu.Unlock()
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not an orderly close
		}
		p.untrack(c)
		return
	}
	if !p.track(up) {
		_ = up.Close()
		p.untrack(c)
		return
	}
	clean := make(chan bool, 2)
	go func() { clean <- p.delayedCopy(up, c) }()
	go func() { clean <- p.delayedCopy(c, up) }()
	if !<-clean {
		p.untrack(c, up) // closing both ends ends the other direction
	}
	<-clean
	p.untrack(c, up)
}

// chunk is bytes read from one side, due for delivery to the other.
type chunk struct {
	buf *[]byte
	n   int
	due time.Time
}

// delayedCopy copies src to dst, delivering each chunk read at its read
// time plus a sample of the delay, in order. At src's EOF it half-closes
// dst once everything read was delivered and reports true; on any other
// end it reports false, and the caller closes both.
func (p *Proxy) delayedCopy(dst, src net.Conn) bool {
	d := p.Delay
	tm, err := newTimer()
	if err != nil {
		return false
	}
	defer tm.close()
	ch := make(chan chunk, 256)
	var readErr error
	go func() {
		defer close(ch)
		var last time.Time
		for {
			bp := p.pool.Get().(*[]byte)
			n, err := src.Read(*bp)
			if n > 0 {
				due := time.Now().Add(d.sample())
				if due.Before(last) {
					due = last
				}
				last = due
				ch <- chunk{buf: bp, n: n, due: due}
			} else {
				p.pool.Put(bp)
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	var writeErr error
	for c := range ch {
		if writeErr == nil {
			if writeErr = tm.sleepUntil(c.due); writeErr == nil {
				_, writeErr = dst.Write((*c.buf)[:c.n])
			}
			if writeErr != nil {
				_ = src.Close() // stop the reader
			}
		}
		p.pool.Put(c.buf)
	}
	if writeErr == nil && errors.Is(readErr, io.EOF) {
		if tc, ok := dst.(*net.TCPConn); ok && tc.CloseWrite() == nil {
			return true // the other direction ends on its own
		}
	}
	return false
}

// ServeEcho answers every connection accepted on ln with the bytes it
// sends, until ln is closed.
func ServeEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// RTT summarises round-trip times.
type RTT struct {
	N                       int
	Min, P50, P90, P99, Max time.Duration
	Mean                    time.Duration
}

// String is "n=200 min=… p50=… p90=… p99=… max=… mean=…".
func (r RTT) String() string {
	rd := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	return fmt.Sprintf("n=%d min=%v p50=%v p90=%v p99=%v max=%v mean=%v", r.N, rd(r.Min), rd(r.P50), rd(r.P90), rd(r.P99), rd(r.Max), rd(r.Mean))
}

// Summarise sorts samples and summarises them.
func Summarise(samples []time.Duration) RTT {
	s := slices.Clone(samples)
	slices.Sort(s)
	if len(s) == 0 {
		return RTT{}
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	at := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))] }
	return RTT{N: len(s), Min: s[0], P50: at(.5), P90: at(.9), P99: at(.99), Max: s[len(s)-1], Mean: sum / time.Duration(len(s))}
}

// MeasureRTT times n one-byte round trips on c (to an echo server).
func MeasureRTT(c net.Conn, n int) (RTT, error) {
	var b [1]byte
	samples := make([]time.Duration, 0, n)
	_ = c.SetDeadline(time.Now().Add(time.Duration(n) * time.Second))
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			return RTT{}, err
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return RTT{}, err
		}
		if b[0] != byte(i) {
			return RTT{}, fmt.Errorf("echo sent %d back for %d", b[0], byte(i))
		}
		samples = append(samples, time.Since(start))
	}
	return Summarise(samples), nil
}
