package peerlink

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MaxFrame bounds a frame's length; a longer one is a protocol error that
// closes the connection.
const MaxFrame = 4 << 20

// writeTimeout bounds one write: a peer that stops reading for this long
// loses the link.
const writeTimeout = 30 * time.Second

// Errors of a call.
var (
	// ErrNotSent: the call never left this process.
	ErrNotSent = errors.New("peerlink: the call was not sent")
	// ErrUnknown: the call may have reached the server; its answer was lost.
	ErrUnknown = errors.New("peerlink: the call may have been received; its answer was lost")
	// ErrClosed is the cause of calls failed because the link was closed.
	ErrClosed = errors.New("peerlink: link closed")
)

// Call states.
const (
	callQueued    int32 = iota
	callTaken           // taken by the writer: its bytes may reach the peer
	callWithdrawn       // withdrawn by its caller before the writer took it
)

type call struct {
	id    uint64
	req   []byte
	state atomic.Int32
	done  chan answer
}

type answer struct {
	payload []byte
	err     error
}

// Client is the calling end of a link.
type Client struct {
	conn net.Conn
	br   *bufio.Reader

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	queue   []*call
	closed  bool
	cause   error

	wake chan struct{}
	done chan struct{}
}

// NewClient starts a link's calling end over conn; br, when not nil, holds
// bytes already read from conn (after a protocol upgrade).
func NewClient(conn net.Conn, br *bufio.Reader) *Client {
	if br == nil {
		br = bufio.NewReaderSize(conn, 64<<10)
	}
	c := &Client{conn: conn, br: br, pending: make(map[uint64]*call), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.writeLoop()
	go c.readLoop()
	return c
}

// Done is closed once the link is closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the link closed (nil while it is open).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// Call sends req and waits for its answer, until ctx is done. Errors wrap
// ErrNotSent or ErrUnknown (see the package comment).
func (c *Client) Call(ctx context.Context, req []byte) ([]byte, error) {
	if len(req) > MaxFrame-binary.MaxVarintLen64 {
		return nil, fmt.Errorf("%w: a payload of %d bytes exceeds the frame limit", ErrNotSent, len(req))
	}
	if len(req) == 0 {
		return nil, fmt.Errorf("%w: an empty payload is a cancel frame, not a call", ErrNotSent)
	}
	cl := &call{req: req, done: make(chan answer, 1)}
	c.mu.Lock()
	if c.closed {
		cause := c.cause
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrNotSent, cause)
	}
	c.nextID++
	cl.id = c.nextID
	c.pending[cl.id] = cl
	c.queue = append(c.queue, cl)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case a := <-cl.done:
		return a.payload, a.err
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, cl.id)
		c.mu.Unlock()
		if cl.state.CompareAndSwap(callQueued, callWithdrawn) {
			return nil, fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
		}
		c.cancelCall(cl.id)
		return nil, fmt.Errorf("%w: %w", ErrUnknown, ctx.Err())
	}
}

// cancelCall queues the cancel frame of a call that was sent.
func (c *Client) cancelCall(id uint64) {
	c.mu.Lock()
	if !c.closed {
		c.queue = append(c.queue, &call{id: id})
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Close closes the link; pending calls fail as the package comment says.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	return nil
}

// fail closes the link once, failing every pending call.
func (c *Client) fail(cause error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed, c.cause = true, cause
	pending := c.pending
	c.pending, c.queue = nil, nil
	c.mu.Unlock()
	_ = c.conn.Close()
	close(c.done)
	for _, cl := range pending {
		err := fmt.Errorf("%w: %w", ErrUnknown, cause)
		if cl.state.CompareAndSwap(callQueued, callWithdrawn) {
			err = fmt.Errorf("%w: %w", ErrNotSent, cause)
		}
		cl.done <- answer{err: err}
	}
}

// yieldToSenders lets the goroutines that are ready to run go first, once,
// before a writer takes what it has been given. The goroutine that wakes a
// writer hands it the processor next, so without this a writer woken by the
// first of many callers (the waiters of one committed entry, the requests of
// one poll) would write a frame each; after it, they share a write.
func yieldToSenders() { runtime.Gosched() }

func (c *Client) writeLoop() {
	var buf []byte
	for {
		select {
		case <-c.done:
			return
		case <-c.wake:
		}
		yieldToSenders()
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		c.mu.Unlock()
		buf = buf[:0]
		for _, cl := range batch {
			if cl.state.CompareAndSwap(callQueued, callTaken) {
				buf = appendFrame(buf, cl.id, cl.req)
			}
		}
		if len(buf) == 0 {
			continue
		}
		_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := c.conn.Write(buf); err != nil {
			c.fail(fmt.Errorf("write: %w", err))
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil // do not keep a rare large buffer
		}
	}
}

func (c *Client) readLoop() {
	for {
		id, payload, err := readFrame(c.br)
		if err != nil {
			c.fail(fmt.Errorf("read: %w", err))
			return
		}
		c.mu.Lock()
		cl := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if cl != nil {
			cl.done <- answer{payload: payload}
		}
	}
}

func appendFrame(buf []byte, id uint64, payload []byte) []byte {
	var idb [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(idb[:], id)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n+len(payload)))
	buf = append(buf, idb[:n]...)
	return append(buf, payload...)
}

// readFrame reads one frame; the payload is a fresh slice.
func readFrame(r *bufio.Reader) (uint64, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes is outside 1..%d", n, MaxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, err
	}
	id, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, errors.New("frame without a valid call id")
	}
	return id, b[k:], nil
}

// Handler answers one call: it appends its answer to dst and returns it.
// ctx ends when the link closes, or when the caller sends the call's cancel
// frame. Neither req nor the answer is used after the next call on the
// same goroutine, so dst is the answer buffer of the call before.
type Handler func(ctx context.Context, req, dst []byte) []byte

// Serve answers calls on conn until it fails or ctx ends, each call's
// handler on its own goroutine, at most maxInFlight at once. Reading never
// stops while the handlers are busy, so cancel frames are always read: calls
// beyond maxInFlight wait in a queue of at most maxInFlight calls, and a call
// that finds the queue full, or is cancelled while it waits, is answered by
// busy, which must answer at once with a definite refusal (the call was not
// acted on). Goroutines are kept for later calls once their call is
// answered, so their grown stacks serve again. br, when not nil, holds bytes
// already read from conn.
func Serve(ctx context.Context, conn net.Conn, br *bufio.Reader, maxInFlight int, h, busy Handler) error {
	if br == nil {
		br = bufio.NewReaderSize(conn, 64<<10)
	}
	if maxInFlight < 1 {
		maxInFlight = 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &serverWriter{conn: conn, wake: make(chan struct{}, 1)}
	go func() {
		<-ctx.Done()
		_ = conn.Close()
	}()
	go w.loop(ctx, cancel)
	d := &dispatcher{ctx: ctx, h: h, w: w, max: maxInFlight, jobs: make(chan *serverCall), running: map[uint64]*serverCall{}}
	defer d.wg.Wait()
	for {
		id, payload, err := readFrame(br)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("peerlink: read: %w", err)
		}
		if len(payload) == 0 { // a cancel frame
			if queued := d.cancel(id); queued != nil {
				w.send(id, busy(ctx, queued.payload, nil))
			}
			continue
		}
		c := &serverCall{id: id, payload: payload}
		if !d.submit(c) {
			w.send(id, busy(ctx, payload, nil))
		}
	}
}

// dispatcher hands calls to handler goroutines: at most max run at once and
// at most max more wait their turn in order.
type dispatcher struct {
	ctx  context.Context
	h    Handler
	w    *serverWriter
	max  int
	jobs chan *serverCall // to an idle goroutine
	wg   sync.WaitGroup

	mu      sync.Mutex
	running map[uint64]*serverCall
	waiting []*serverCall
}

// submit runs c, or queues it; false when the queue is full.
func (d *dispatcher) submit(c *serverCall) bool {
	d.mu.Lock()
	if len(d.running) >= d.max {
		ok := len(d.waiting) < d.max
		if ok {
			d.waiting = append(d.waiting, c)
		}
		d.mu.Unlock()
		return ok
	}
	d.running[c.id] = c
	d.mu.Unlock()
	select {
	case d.jobs <- c: // an idle goroutine takes it
	default:
		d.wg.Add(1)
		go d.work(c)
	}
	return true
}

// cancel ends the call id: a running call's context is cancelled (its
// handler answers), a waiting call is taken out of the queue and returned,
// for the caller to answer.
func (d *dispatcher) cancel(id uint64) *serverCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.running[id]; ok {
		c.cancelled = true
		if c.stop != nil {
			c.stop()
		}
		return nil
	}
	for i, c := range d.waiting {
		if c.id == id {
			d.waiting = append(d.waiting[:i], d.waiting[i+1:]...)
			return c
		}
	}
	return nil
}

// work answers calls: first, then any that waited, then those handed to it
// while idle, until the link ends. Its calls share one context, made again
// only after a cancel frame has ended it: a call is answered before the
// next one starts, and a cancel frame finds its call among the running
// ones only until the worker has taken it out, under d.mu.
func (d *dispatcher) work(first *serverCall) {
	defer d.wg.Done()
	wc := d.workerContext()
	defer func() { wc.stop() }()
	var buf []byte // the answers' buffer: send copies each answer out
	for c := first; ; {
		d.mu.Lock()
		c.stop = wc.stop
		if c.cancelled {
			wc.stop() // its cancel frame came before this worker took it
		}
		d.mu.Unlock()
		answer := d.h(wc.ctx, c.payload, buf[:0])
		d.w.send(c.id, answer)
		if cap(answer) <= 64<<10 {
			buf = answer
		}
		d.mu.Lock()
		delete(d.running, c.id)
		if wc.ctx.Err() != nil && d.ctx.Err() == nil {
			wc = d.workerContext() // a cancel frame ended the last one
		}
		if len(d.waiting) > 0 {
			c = d.waiting[0]
			d.waiting[0] = nil
			d.waiting = d.waiting[1:]
			d.running[c.id] = c
			d.mu.Unlock()
			continue
		}
		d.mu.Unlock()
		select {
		case c = <-d.jobs:
		case <-d.ctx.Done():
			return
		}
	}
}

// workerContext is the context a worker's calls share, and its cancel.
type workerContext struct {
	ctx  context.Context
	stop context.CancelFunc
}

func (d *dispatcher) workerContext() workerContext {
	ctx, stop := context.WithCancel(d.ctx)
	return workerContext{ctx: ctx, stop: stop}
}

// serverCall is one call read from the link. Its fields other than id and
// payload are guarded by dispatcher.mu.
type serverCall struct {
	id      uint64
	payload []byte
	// cancelled is set by the call's cancel frame while it runs or is
	// handed to a worker.
	cancelled bool
	// stop cancels the context of the worker running the call, once one
	// has taken it.
	stop context.CancelFunc
}

// serverWriter gathers answers and writes those that are ready together.
type serverWriter struct {
	conn net.Conn
	mu   sync.Mutex
	buf  []byte
	wake chan struct{}
}

func (w *serverWriter) send(id uint64, payload []byte) {
	w.mu.Lock()
	w.buf = appendFrame(w.buf, id, payload)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *serverWriter) loop(ctx context.Context, cancel context.CancelFunc) {
	var out []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		yieldToSenders()
		w.mu.Lock()
		out, w.buf = w.buf, out[:0]
		w.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		_ = w.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.conn.Write(out); err != nil {
			cancel()
			return
		}
		if cap(out) > 1<<20 {
			out = nil
		}
	}
}
