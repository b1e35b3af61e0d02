package peerlink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"
)

// busyAnswer is the refusal of a call the server did not run.
func busyAnswer(_ context.Context, req, _ []byte) []byte { return append([]byte("busy:"), req...) }

// serveOne serves the first connection to a loopback listener with h, at
// most maxInFlight calls at once, until ctx ends; it returns a connection
// to it and the channel Serve's error arrives on.
func serveOne(t *testing.T, ctx context.Context, maxInFlight int, h Handler) (net.Conn, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		defer ln.Close()
		conn, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		served <- Serve(ctx, conn, nil, maxInFlight, h, busyAnswer)
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return conn, served
}

// pair returns a client connected to a server running h over loopback TCP.
func pair(t *testing.T, h Handler) (*Client, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, served := serveOne(t, ctx, 128, h)
	c := NewClient(conn, nil)
	return c, func() {
		cancel()
		_ = c.Close()
		<-served
	}
}

func TestCallsGetTheirOwnAnswers(t *testing.T) {
	c, stop := pair(t, func(_ context.Context, req, _ []byte) []byte {
		return append([]byte("re:"), req...)
	})
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := fmt.Appendf(nil, "call-%d", i)
			ans, err := c.Call(context.Background(), req)
			if err != nil || !bytes.Equal(ans, append([]byte("re:"), req...)) {
				errs <- fmt.Errorf("call %d: %q, %v", i, ans, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestACallOnAClosedLinkWasNotSent(t *testing.T) {
	c, stop := pair(t, func(_ context.Context, req, _ []byte) []byte { return req })
	defer stop()
	_ = c.Close()
	if _, err := c.Call(context.Background(), []byte("x")); !errors.Is(err, ErrNotSent) {
		t.Fatalf("call on a closed link: %v, want ErrNotSent", err)
	}
}

func TestACallTheServerReceivedIsUnknownWhenItsAnswerIsLost(t *testing.T) {
	got := make(chan struct{})
	release := make(chan struct{})
	c, stop := pair(t, func(ctx context.Context, req, _ []byte) []byte {
		close(got)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return req
	})
	defer stop()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), []byte("x"))
		errc <- err
	}()
	<-got
	_ = c.Close() // the answer can no longer arrive
	if err := <-errc; !errors.Is(err, ErrUnknown) {
		t.Fatalf("a received call whose answer was lost: %v, want ErrUnknown", err)
	}
	close(release)

	// The same for a caller that gives up while the server works on it.
	c2, stop2 := pair(t, func(ctx context.Context, req, _ []byte) []byte {
		<-ctx.Done()
		return req
	})
	defer stop2()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c2.Call(ctx, []byte("y")); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a call given up after it was written: %v, want ErrUnknown", err)
	}
}

// TestAQueuedCallWithdrawnByItsCallerWasNotSent: while the writer is stuck
// writing one call (the peer reads nothing), a second call whose caller
// gives up is withdrawn, never written.
func TestAQueuedCallWithdrawnByItsCallerWasNotSent(t *testing.T) {
	local, remote := net.Pipe()
	defer remote.Close()
	c := NewClient(local, nil)
	defer c.Close()
	go func() { _, _ = c.Call(context.Background(), []byte("stuck")) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		taken := len(c.pending) == 1 && len(c.queue) == 0
		c.mu.Unlock()
		if taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first call was never taken by the writer")
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Call(ctx, []byte("queued")); !errors.Is(err, ErrNotSent) {
		t.Fatalf("a call withdrawn while queued: %v, want ErrNotSent", err)
	}
}

func TestAnOversizedFrameClosesTheLink(t *testing.T) {
	local, remote := net.Pipe()
	c := NewClient(local, nil)
	defer c.Close()
	go func() {
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], MaxFrame+1)
		_, _ = remote.Write(hdr[:])
	}()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("an oversized frame did not close the link")
	}
	if err := c.Err(); err == nil {
		t.Fatal("no cause recorded")
	}
}

func TestReadFrameRefusesBrokenFrames(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty frame":   {0, 0, 0, 0},
		"no id":         {0, 0, 0, 1, 0x80},
		"truncated":     {0, 0, 0, 9, 1, 2},
		"short header":  {0, 0},
		"oversized len": {0xff, 0xff, 0xff, 0xff},
	} {
		if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(b))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	id, p, err := readFrame(bufio.NewReader(bytes.NewReader(appendFrame(nil, 300, []byte("abc")))))
	if err != nil || id != 300 || string(p) != "abc" {
		t.Fatalf("round trip: %d %q %v", id, p, err)
	}
}

func BenchmarkCall(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			_ = Serve(context.Background(), conn, nil, 1024, func(_ context.Context, req, _ []byte) []byte { return req }, busyAnswer)
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c := NewClient(conn, nil)
	defer c.Close()
	req := make([]byte, 200)
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Call(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func TestACallerGivingUpCancelsTheHandler(t *testing.T) {
	started := make(chan struct{}, 1)
	cancelled := make(chan string, 2)
	c, stop := pair(t, func(ctx context.Context, req, _ []byte) []byte {
		if string(req) == "wait" {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				cancelled <- "cancelled"
			case <-time.After(10 * time.Second):
				cancelled <- "not cancelled"
			}
		}
		if ctx.Err() != nil && string(req) != "wait" {
			return append([]byte("ended:"), req...) // a later call under the cancelled context
		}
		return req
	})
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, []byte("wait"))
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, ErrUnknown) {
		t.Fatalf("a sent call given up: %v, want ErrUnknown", err)
	}
	select {
	case got := <-cancelled:
		if got != "cancelled" {
			t.Fatal("the handler's context was not cancelled")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled within 5 s")
	}
	// The link still works, the calls after it run under a live context
	// (once idle, the cancelled call's worker is the first to take a new
	// call, so one of three calls in turn reaches it), and an empty payload is not
	// a call.
	for range 3 {
		if ans, err := c.Call(context.Background(), []byte("after")); err != nil || string(ans) != "after" {
			t.Fatalf("call after a cancel: %q, %v", ans, err)
		}
	}
	if _, err := c.Call(context.Background(), nil); !errors.Is(err, ErrNotSent) {
		t.Fatalf("an empty call: %v, want ErrNotSent", err)
	}
}

// TestCancelsAreReadWhileEverySlotIsTaken: with both handler slots taken,
// two more calls wait, a fifth is refused at once, a cancel frame for a
// waiting call takes it out of the queue (its handler never runs), and a
// cancel frame for a running call reaches its handler.
func TestCancelsAreReadWhileEverySlotIsTaken(t *testing.T) {
	started := make(chan string, 8)
	var mu sync.Mutex
	var ran []string
	h := func(ctx context.Context, req, _ []byte) []byte {
		mu.Lock()
		ran = append(ran, string(req))
		mu.Unlock()
		started <- string(req)
		select {
		case <-ctx.Done():
			return append([]byte("cancelled:"), req...)
		case <-time.After(10 * time.Second):
			return append([]byte("timed out:"), req...)
		}
	}
	conn, _ := serveOne(t, context.Background(), 2, h)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	write := func(frames ...[]byte) {
		t.Helper()
		var buf []byte
		for _, f := range frames {
			buf = append(buf, f...)
		}
		if _, err := conn.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(id uint64, payload string) {
		t.Helper()
		gotID, got, err := readFrame(br)
		if err != nil {
			t.Fatalf("reading the answer to call %d: %v", id, err)
		}
		if gotID != id || string(got) != payload {
			t.Fatalf("answer: call %d %q, want call %d %q", gotID, got, id, payload)
		}
	}
	waitStarted := func(want string) {
		t.Helper()
		select {
		case got := <-started:
			if got != want {
				t.Fatalf("handler started %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("handler of %q did not start within 5 s", want)
		}
	}
	var calls [][]byte
	for i, p := range []string{"a", "b", "c", "d", "e"} {
		calls = append(calls, appendFrame(nil, uint64(i+1), []byte(p)))
	}
	write(calls...)
	expect(5, "busy:e") // two run, two wait, the fifth finds the queue full
	first := map[string]bool{<-started: true, <-started: true}
	if !first["a"] || !first["b"] {
		t.Fatalf("handlers started first: %v, want a and b", first)
	}

	write(appendFrame(nil, 4, nil)) // cancel a waiting call
	expect(4, "busy:d")
	write(appendFrame(nil, 1, nil)) // cancel a running call while every slot is taken
	expect(1, "cancelled:a")
	waitStarted("c") // the freed slot goes to the call that waited
	write(appendFrame(nil, 2, nil), appendFrame(nil, 3, nil))
	for range 2 {
		id, got, err := readFrame(br)
		if err != nil || (id == 2) != (string(got) == "cancelled:b") || (id == 3) != (string(got) == "cancelled:c") {
			t.Fatalf("answer after cancel: call %d %q, %v", id, got, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(ran)
	if fmt.Sprint(ran) != "[a b c]" {
		t.Fatalf("handlers ran for %v, want [a b c] (never a cancelled waiting call or a refused one)", ran)
	}
}
