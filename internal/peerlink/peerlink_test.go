package peerlink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// pair returns a client connected to a server running h over loopback TCP.
func pair(t *testing.T, h Handler) (*Client, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		served <- Serve(ctx, conn, nil, 16, h)
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(conn, nil)
	return c, func() {
		cancel()
		_ = c.Close()
		_ = ln.Close()
		<-served
	}
}

func TestCallsGetTheirOwnAnswers(t *testing.T) {
	c, stop := pair(t, func(_ context.Context, req []byte) []byte {
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
	c, stop := pair(t, func(_ context.Context, req []byte) []byte { return req })
	defer stop()
	_ = c.Close()
	if _, err := c.Call(context.Background(), []byte("x")); !errors.Is(err, ErrNotSent) {
		t.Fatalf("call on a closed link: %v, want ErrNotSent", err)
	}
}

func TestACallTheServerReceivedIsUnknownWhenItsAnswerIsLost(t *testing.T) {
	got := make(chan struct{})
	release := make(chan struct{})
	c, stop := pair(t, func(ctx context.Context, req []byte) []byte {
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
	c2, stop2 := pair(t, func(ctx context.Context, req []byte) []byte {
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
			_ = Serve(context.Background(), conn, nil, 1024, func(_ context.Context, req []byte) []byte { return req })
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
	c, stop := pair(t, func(ctx context.Context, req []byte) []byte {
		if string(req) == "wait" {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				cancelled <- "cancelled"
			case <-time.After(10 * time.Second):
				cancelled <- "not cancelled"
			}
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
	// The link still works, and an empty payload is not a call.
	if ans, err := c.Call(context.Background(), []byte("after")); err != nil || string(ans) != "after" {
		t.Fatalf("call after a cancel: %q, %v", ans, err)
	}
	if _, err := c.Call(context.Background(), nil); !errors.Is(err, ErrNotSent) {
		t.Fatalf("an empty call: %v, want ErrNotSent", err)
	}
}
