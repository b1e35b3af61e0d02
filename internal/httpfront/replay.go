package httpfront

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// replayConn is a connection handed to net/http: its first reads return
// the bytes the front read, and the read deadlines net/http sets before it
// has read the handed-over request's head are moved back by the time the
// front spent on that request, so they fall where net/http would have put
// them had it read the connection from the start.
type replayConn struct {
	net.Conn
	pending []byte
	// shift is how far back read deadlines move, in nanoseconds; zero
	// once net/http has read the head (its ConnState hook says so).
	shift atomic.Int64
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// settle stops moving deadlines.
func (c *replayConn) settle() { c.shift.Store(0) }

func (c *replayConn) moved(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(-time.Duration(c.shift.Load()))
}

// SetReadDeadline sets the read deadline, moved back until net/http has
// read the head.
func (c *replayConn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.moved(t)) }

// SetDeadline sets both deadlines, the read one as SetReadDeadline does.
func (c *replayConn) SetDeadline(t time.Time) error {
	return errors.Join(c.Conn.SetWriteDeadline(t), c.SetReadDeadline(t))
}

// CloseWrite shuts the sending side, for net/http's lingering close.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("httpfront: the connection cannot close its sending side alone")
}

// ReadFrom copies r to the connection, with sendfile where the connection
// has it.
func (c *replayConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(c.Conn, r)
}
