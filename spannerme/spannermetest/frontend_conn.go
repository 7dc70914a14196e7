package spannermetest

import (
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
)

// rawFrame is one gRPC message as the bytes on the wire, never decoded.
type rawFrame struct {
	data mem.BufferSlice
}

// free releases the frame's buffers unless gRPC took them.
func (f *rawFrame) free() {
	if f.data != nil {
		f.data.Free()
		f.data = nil
	}
}

// rawCodec passes messages through as bytes ([rawFrame]), without copying:
// Unmarshal keeps a reference to the received buffers and Marshal hands
// that reference on to gRPC, which frees it once sent
// (google.golang.org/grpc/encoding.CodecV2).
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f := v.(*rawFrame)
	out := f.data
	f.data = nil
	return out, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f := v.(*rawFrame)
	data.Ref()
	f.data = data
	return nil
}

// Name is the content-subtype of forwarded calls whose caller sent none:
// the backend sees "application/grpc+proto", which gRPC defines as the
// same as "application/grpc".
func (rawCodec) Name() string { return "proto" }

// trackingListener is a net.Listener that knows the connections it
// accepted, so that they can be counted and dropped.
type trackingListener struct {
	net.Listener

	accepted, active atomic.Int64

	// mu guards conns and closed.
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func newTrackingListener(ln net.Listener) *trackingListener {
	return &trackingListener{Listener: ln, conns: make(map[*trackedConn]struct{})}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.closed { // Close raced with Accept: the next Accept fails
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		tc := &trackedConn{Conn: c, l: l}
		l.conns[tc] = struct{}{}
		l.accepted.Add(1)
		l.active.Add(1)
		l.mu.Unlock()
		return tc, nil
	}
}

func (l *trackingListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return l.Listener.Close()
}

// closeConns closes up to limit tracked connections (every one if limit is negative) and
// returns how many it closed.
func (l *trackingListener) closeConns(limit int) int {
	l.mu.Lock()
	cs := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		if limit >= 0 && len(cs) >= limit {
			break
		}
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
	return len(cs)
}

// trackedConn leaves its listener's set when closed.
type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		defer c.l.mu.Unlock()
		if _, ok := c.l.conns[c]; ok {
			delete(c.l.conns, c)
			c.l.active.Add(-1)
		}
	})
	return err
}
