package spannermetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

const (
	// readBufSize is the largest chunk read from one side at once.
	readBufSize = 32 << 10
	// queuedChunks bounds the chunks read but not yet delivered, per
	// direction (at most queuedChunks×readBufSize bytes).
	queuedChunks = 8
)

// link is one proxied connection: a client connection accepted by the
// endpoint and, unless blackholed from the start, its backend connection.
//
// Each direction is a reader goroutine (pump) and a writer goroutine
// (deliver) joined by a bounded channel of chunks, so that latency delays
// each chunk without serializing the reads.
type link struct {
	e      *Endpoint
	client net.Conn
	ctx    context.Context // cancelled by drop
	cancel context.CancelFunc

	// blackholed, once set, is never cleared: the link forwards nothing
	// more until it is dropped.
	blackholed atomic.Bool
	// halfClosed counts directions that ended with EOF and were
	// half-closed; at 2 the link is done.
	halfClosed atomic.Int32

	// mu guards backend and dropped, which connect and drop race on.
	mu      sync.Mutex
	backend net.Conn
	dropped bool

	dropOnce sync.Once

	// toBackend and fromBackend count this connection's bytes, as the endpoint's counters do.
	toBackend, fromBackend atomic.Int64
}

// chunk is bytes read from one side, to be written to the other no earlier
// than due (zero: at once).
type chunk struct {
	data []byte
	due  time.Time
}

// connect dials the backend and starts the four pumps. Runs in its own
// goroutine started by spawn.
func (l *link) connect() {
	d := net.Dialer{Timeout: backendDialTimeout}
	b, err := d.DialContext(l.ctx, "tcp", l.e.backend)
	if err != nil {
		l.drop(true) // the client sees a reset, as behind a dead backend
		return
	}
	l.mu.Lock()
	if l.dropped {
		l.mu.Unlock()
		closeConn(b, true)
		return
	}
	l.backend = b
	l.mu.Unlock()

	toBackend := make(chan chunk, queuedChunks)
	fromBackend := make(chan chunk, queuedChunks)
	e := l.e
	e.spawn(func() { l.pump(l.client, toBackend, &e.toBackend, &l.toBackend, true) })
	e.spawn(func() { l.deliver(b, toBackend, func(s *shaping) *rate.Limiter { return s.toBackend }) })
	e.spawn(func() { l.pump(b, fromBackend, &e.fromBackend, &l.fromBackend, false) })
	e.spawn(func() { l.deliver(l.client, fromBackend, func(s *shaping) *rate.Limiter { return s.fromBackend }) })
}

// pump reads src until it fails and queues what it reads on out, counting
// the bytes in counter. A blackholed link's bytes are read and discarded.
// fromClient tells whether src is the client side. out and counter may be
// nil for a link blackholed from the start.
//
// At EOF, pump closes out so that deliver half-closes the other side after
// the queued bytes. Any other read error drops the link with a reset, as a
// proxy propagates resets. In a blackhole the end of the client side drops
// the link, while the end of the backend side is hidden from the client
// (the blackhole swallows the FIN too).
func (l *link) pump(src net.Conn, out chan<- chunk, counter, linkCounter *atomic.Int64, fromClient bool) {
	buf := make([]byte, readBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.blackholed.Load() {
			var due time.Time
			if sh := l.e.shaping.Load(); sh != nil && sh.latency > 0 {
				due = time.Now().Add(sh.latency)
			}
			counter.Add(int64(n))
			linkCounter.Add(int64(n))
			select {
			case out <- chunk{data: bytes.Clone(buf[:n]), due: due}:
			case <-l.ctx.Done():
				return
			}
		}
		if err == nil {
			continue
		}
		switch {
		case l.blackholed.Load():
			if fromClient {
				l.drop(false)
			}
		case errors.Is(err, io.EOF):
			close(out)
		default:
			l.drop(true)
		}
		return
	}
}

// deliver writes the chunks from in to dst, each no earlier than its due
// time and within the bandwidth limit that limiter picks from the current
// shaping, until in is closed (then it half-closes dst) or the link is
// dropped. Chunks of a blackholed link are discarded.
func (l *link) deliver(dst net.Conn, in <-chan chunk, limiter func(*shaping) *rate.Limiter) {
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-in:
		case <-l.ctx.Done():
			return
		}
		if !ok {
			l.halfClose(dst)
			return
		}
		if !c.due.IsZero() && !l.sleepUntil(c.due) {
			return
		}
		for data := c.data; len(data) > 0 && !l.blackholed.Load(); {
			// The limiter is looked up per piece so that Pass or a new
			// Slow applies within one piece (about 0.1 s) of waiting.
			var lim *rate.Limiter
			if sh := l.e.shaping.Load(); sh != nil {
				lim = limiter(sh)
			}
			piece := data
			if lim != nil {
				piece = data[:min(len(data), lim.Burst())]
				if lim.WaitN(l.ctx, len(piece)) != nil {
					return // dropped
				}
			}
			if _, err := dst.Write(piece); err != nil {
				l.drop(true)
				return
			}
			data = data[len(piece):]
		}
	}
}

// sleepUntil waits until t and reports whether the link is still up.
func (l *link) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return l.ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-l.ctx.Done():
		return false
	}
}

// halfClose forwards an EOF by closing dst for writing; once both
// directions have ended so, the link is done and closed.
func (l *link) halfClose(dst net.Conn) {
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() != nil {
			l.drop(true)
			return
		}
	}
	if l.halfClosed.Add(1) == 2 {
		l.drop(false)
	}
}

// drop closes both sides of the link (with a TCP reset when abort is true,
// else with a normal close), stops its goroutines and unregisters it.
// Safe to call more than once and from any goroutine; must not be called
// with e.mu held.
func (l *link) drop(abort bool) {
	l.dropOnce.Do(func() {
		l.cancel()
		l.mu.Lock()
		l.dropped = true
		b := l.backend
		l.mu.Unlock()
		closeConn(l.client, abort)
		if b != nil {
			closeConn(b, abort)
		}
		l.e.forget(l)
	})
}

// closeConn closes c; with abort, a TCP connection is closed with a reset
// (SO_LINGER 0) so that its peer notices at once and no TIME_WAIT is left.
func closeConn(c net.Conn, abort bool) {
	if tc, ok := c.(*net.TCPConn); ok && abort {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
