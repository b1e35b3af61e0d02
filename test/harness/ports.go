package harness

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// PortAllocator hands out TCP ports on 127.0.0.1 for nodes to listen on.
//
// Ports are picked below the kernel's ephemeral range, so outgoing
// connections (which take ephemeral ports) can never occupy a port that was
// handed out for a node that is not listening yet, and never twice within
// one allocator. The starting point is random so that several test
// binaries running at once rarely meet; every port is also checked to be
// free at the time it is handed out.
type PortAllocator struct {
	mu     sync.Mutex
	lo, hi int // [lo, hi)
	next   int
	used   map[int]bool
}

// NewPortAllocator returns an allocator for this machine's free range.
func NewPortAllocator() (*PortAllocator, error) {
	lo, hi := 20000, 32000
	if elo, ehi, ok := ephemeralRange(); ok {
		switch {
		case elo > 12000:
			hi = elo
			lo = max(10000, hi-20000)
		case ehi < 60000:
			lo, hi = ehi+1, 65000
		}
	}
	if hi-lo < 1000 {
		return nil, fmt.Errorf("no usable port range outside the ephemeral ports (%d-%d)", lo, hi)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("random start port: %w", err)
	}
	start := lo + int(binary.LittleEndian.Uint64(b[:])%uint64(hi-lo))
	return &PortAllocator{lo: lo, hi: hi, next: start, used: map[int]bool{}}, nil
}

func ephemeralRange() (int, int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return lo, hi, true
}

// Addr returns "127.0.0.1:port" for a port that is free now and was never
// handed out by this allocator before.
func (p *PortAllocator) Addr() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for tries := 0; tries < p.hi-p.lo; tries++ {
		port := p.next
		p.next++
		if p.next >= p.hi {
			p.next = p.lo
		}
		if p.used[port] {
			continue
		}
		p.used[port] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		_ = ln.Close()
		return addr, nil
	}
	return "", errors.New("no free loopback port left")
}
