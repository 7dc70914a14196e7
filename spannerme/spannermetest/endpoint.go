package spannermetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// ErrClosed is returned by [Endpoint.Up] after [Endpoint.Close].
var ErrClosed = errors.New("spannermetest: endpoint closed")

const (
	// backendDialTimeout bounds the dial to the backend for one accepted
	// connection; the client connection is reset when it fails.
	backendDialTimeout = 5 * time.Second
	// upRetryTimeout and upRetryInterval bound how long Up keeps retrying
	// while the OS reports the port as still in use.
	upRetryTimeout  = 5 * time.Second
	upRetryInterval = 10 * time.Millisecond
	// acceptRetryInterval is the pause after a non-fatal Accept error (for
	// example EMFILE) before accepting again.
	acceptRetryInterval = 5 * time.Millisecond
)

// Mode is what an [Endpoint] does with connections. The zero value is [Pass].
type Mode int

const (
	// Pass forwards bytes both ways unchanged.
	Pass Mode = iota
	// Down means the listener is closed: dials to the endpoint's address
	// are refused. Only [Endpoint.Up] leaves Down.
	Down
	// Blackhole accepts connections but forwards nothing either way.
	Blackhole
	// Slow forwards bytes with added latency and/or a bandwidth limit.
	Slow
	// Closed is the mode after [Endpoint.Close]; it is final.
	Closed
	// DieYoung answers each new connection with HTTP/2 SETTINGS and GOAWAY,
	// then closes it; see [Endpoint.DieYoung].
	DieYoung
)

// String returns the lower-case name of the mode ("pass", "down",
// "blackhole", "slow", "closed", "die-young"), or "Mode(n)" for an unknown
// value.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Down:
		return "down"
	case Blackhole:
		return "blackhole"
	case Slow:
		return "slow"
	case Closed:
		return "closed"
	case DieYoung:
		return "die-young"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Stats are an endpoint's counters since [NewEndpoint], over every Down/Up
// cycle. Each field is read atomically, but the fields are not one
// consistent snapshot when connections are active.
type Stats struct {
	// Accepted is the number of client connections accepted, blackholed
	// and DieYoung ones included. A client's dial can return before the endpoint has
	// accepted the connection, so Accepted may lag a successful dial
	// briefly; it never lags a byte forwarded on that connection.
	Accepted int64
	// Active is the number of accepted client connections not yet closed,
	// blackholed ones and ones still dialing the backend included.
	Active int64
	// BytesToBackend is the number of bytes received from clients and
	// passed on for the backend (client → backend). Bytes are counted when
	// the endpoint receives them, before delivery, so once the backend has
	// seen a byte it is counted; bytes in flight when a connection is
	// dropped (or queued when Blackhole starts) are counted though never
	// delivered. Bytes received while a connection is blackholed are not
	// counted.
	BytesToBackend int64
	// BytesFromBackend is the same count for the other direction
	// (backend → client).
	BytesFromBackend int64
}

// Endpoint is a fake PSC endpoint: a fault-injecting TCP proxy on
// 127.0.0.1 in front of one backend address. Create it with [NewEndpoint]
// or [NewEndpointTB]; the zero value is not usable. All methods are safe
// for concurrent use.
//
// Mode changes apply to live connections too, except that a connection
// accepted in Pass or Slow mode keeps its backend connection until it is
// dropped. A blackholed connection never forwards again: leaving Blackhole
// (Pass, Slow, Reset, Up's implicit Pass, Down, Close) drops it, and the
// client has to reconnect.
type Endpoint struct {
	backend string
	addr    string // fixed at NewEndpoint; Up re-listens on it

	ctx    context.Context // cancelled by Close; parent of every link's context
	cancel context.CancelFunc

	// mu guards the fields below it. No dial, close of a proxied
	// connection or other blocking call runs under mu, except the
	// listener's own Listen and Close.
	mu     sync.Mutex
	mode   Mode
	ln     net.Listener // nil while Down or Closed
	links  map[*link]struct{}
	closed bool

	// shaping is nil except in Slow mode. Pumps load it once per chunk.
	shaping atomic.Pointer[shaping]

	wg      sync.WaitGroup // every goroutine the endpoint started
	running atomic.Int64   // same count as wg, readable by tests

	accepted, active, toBackend, fromBackend atomic.Int64
}

// shaping is the Slow mode's configuration, immutable once stored.
type shaping struct {
	latency time.Duration
	// toBackend and fromBackend limit the bytes per second in each
	// direction for all connections of the endpoint together; nil means
	// no limit.
	toBackend, fromBackend *rate.Limiter
}

// NewEndpoint starts a fake PSC endpoint in [Pass] mode listening on
// 127.0.0.1 with a port chosen by the OS, forwarding to backend
// ("host:port"). The backend is dialed once per accepted connection, not
// now, so it need not be up yet. It returns an error if backend is not a
// host:port address or if listening fails. The caller must call
// [Endpoint.Close].
func NewEndpoint(backend string) (*Endpoint, error) {
	if _, _, err := net.SplitHostPort(backend); err != nil {
		return nil, fmt.Errorf("spannermetest: backend %q: %w", backend, err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("spannermetest: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Endpoint{
		backend: backend,
		addr:    ln.Addr().String(),
		ctx:     ctx,
		cancel:  cancel,
		ln:      ln,
		links:   make(map[*link]struct{}),
	}
	e.mu.Lock()
	e.spawn(func() { e.acceptLoop(ln) })
	e.mu.Unlock()
	return e, nil
}

// NewEndpointTB is [NewEndpoint] for tests: it fails tb with Fatal on error
// and registers [Endpoint.Close] with tb.Cleanup.
func NewEndpointTB(tb testing.TB, backend string) *Endpoint {
	tb.Helper()
	e, err := NewEndpoint(backend)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Close() })
	return e
}

// Addr returns the endpoint's listening address, "127.0.0.1:port". It is
// the same for the endpoint's whole life, across Down and Up.
func (e *Endpoint) Addr() string { return e.addr }

// Backend returns the backend address given to [NewEndpoint].
func (e *Endpoint) Backend() string { return e.backend }

// Mode returns the current mode.
func (e *Endpoint) Mode() Mode {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mode
}

// Stats returns the endpoint's counters; see [Stats].
func (e *Endpoint) Stats() Stats {
	return Stats{
		Accepted:         e.accepted.Load(),
		Active:           e.active.Load(),
		BytesToBackend:   e.toBackend.Load(),
		BytesFromBackend: e.fromBackend.Load(),
	}
}

// ConnStats are one live connection's byte counters, counted as in [Stats].
type ConnStats struct {
	BytesToBackend, BytesFromBackend int64
}

// ConnStats returns the counters of every live connection, keyed by the client's address
// ("127.0.0.1:port"), so that a test can tell how calls spread over a client's connections.
func (e *Endpoint) ConnStats() map[string]ConnStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]ConnStats, len(e.links))
	for l := range e.links {
		out[l.client.RemoteAddr().String()] = ConnStats{BytesToBackend: l.toBackend.Load(), BytesFromBackend: l.fromBackend.Load()}
	}
	return out
}

// Pass makes the endpoint forward bytes normally: it clears [Endpoint.Slow]
// settings (live connections speed up at their next chunk) and, when
// leaving [Blackhole], drops the blackholed connections so that clients
// reconnect. Pass does nothing while the endpoint is Down (use
// [Endpoint.Up]) or closed.
func (e *Endpoint) Pass() { e.setForwarding(Pass, nil) }

// Blackhole makes the endpoint swallow traffic: new connections are
// accepted (the TCP handshake completes) and kept open, but the backend is
// not dialed and nothing is forwarded, so a gRPC client never completes its
// HTTP/2 handshake. Live connections stop forwarding at once in both
// directions; what they receive is read and discarded. A blackholed
// connection stays open until the client closes it or the endpoint leaves
// Blackhole, which drops it. Blackhole does nothing while the endpoint is
// Down or closed.
func (e *Endpoint) Blackhole() { e.setForwarding(Blackhole, nil) }

// Slow adds latency and a bandwidth limit, to new and live connections.
//
// latency is added one way, in each direction, to every chunk of bytes:
// a chunk received at t is delivered no earlier than t+latency (a round
// trip gains 2×latency). bytesPerSecond limits each direction separately,
// for all connections of the endpoint together, like a link's capacity;
// the limit starts with no burst allowance, and bytes are delivered in
// pieces of about a tenth of a second's worth. Zero (or negative) means no
// added latency, respectively no bandwidth limit; Slow(0, 0) is [Endpoint.Pass].
// Each call replaces the previous settings. Leaving [Blackhole] drops the
// blackholed connections. Slow does nothing while the endpoint is Down or
// closed.
func (e *Endpoint) Slow(latency time.Duration, bytesPerSecond int) {
	latency = max(latency, 0)
	if latency == 0 && bytesPerSecond <= 0 {
		e.Pass()
		return
	}
	sh := &shaping{latency: latency}
	if bytesPerSecond > 0 {
		sh.toBackend = newEmptyLimiter(bytesPerSecond)
		sh.fromBackend = newEmptyLimiter(bytesPerSecond)
	}
	e.setForwarding(Slow, sh)
}

// newEmptyLimiter returns a limiter of bytesPerSecond (> 0) whose burst,
// and so the largest piece written at once, is a tenth of a second's worth
// (at least 1 byte, at most 64 KiB). It starts empty so that the limit
// holds from the first byte.
func newEmptyLimiter(bytesPerSecond int) *rate.Limiter {
	burst := min(max(bytesPerSecond/10, 1), 64<<10)
	lim := rate.NewLimiter(rate.Limit(bytesPerSecond), burst)
	lim.AllowN(time.Now(), burst)
	return lim
}

// setForwarding switches between Pass, Blackhole and Slow while the
// endpoint listens.
func (e *Endpoint) setForwarding(m Mode, sh *shaping) {
	var drop []*link
	e.mu.Lock()
	if e.closed || e.ln == nil {
		e.mu.Unlock()
		return
	}
	e.mode = m
	e.shaping.Store(sh)
	for l := range e.links {
		switch {
		case m == Blackhole:
			l.blackholed.Store(true)
		case l.blackholed.Load():
			drop = append(drop, l)
		}
	}
	e.mu.Unlock()
	for _, l := range drop {
		l.drop(true)
	}
}

// DieYoung makes the endpoint answer each new connection as an HTTP/2
// server that is draining does (a proxy or load balancer on the path being
// drained): it sends its SETTINGS, reads the client's connection preface,
// acknowledges the client's SETTINGS, sends GOAWAY (NO_ERROR, last stream
// 0: nothing processed) and closes the connection, within 2 seconds of the
// accept, without dialing the backend. A gRPC client's connection is
// established and goes IDLE before it carries a call, with no error (READY
// in between, or not when the GOAWAY is read first): a connection that
// dies young. Live connections keep forwarding as in [Pass] (blackholed ones are
// dropped, as when leaving [Blackhole]); [Endpoint.Pass] serves new
// connections again. DieYoung does nothing while the endpoint is Down or
// closed.
func (e *Endpoint) DieYoung() { e.setForwarding(DieYoung, nil) }

// Reset drops every live connection (the client and the backend side are
// both closed with a TCP reset, so peers notice at once) and keeps
// accepting new ones, in [Pass] mode: Slow settings and Blackhole are
// cleared too. Reset does nothing while the endpoint is Down or closed.
func (e *Endpoint) Reset() { e.dropAll(true) }

// Drop drops every live connection as Reset does, but keeps the mode. After Blackhole, Drop
// sends the clients back to reconnect into the black hole: an endpoint whose connections died
// and whose address now accepts TCP but never answers. Drop does nothing while the endpoint
// is Down or closed.
func (e *Endpoint) Drop() { e.dropAll(false) }

// dropAll resets every live connection, after returning to Pass mode if pass is set. It
// does nothing while the endpoint is Down or closed.
func (e *Endpoint) dropAll(pass bool) {
	e.mu.Lock()
	if e.closed || e.ln == nil {
		e.mu.Unlock()
		return
	}
	if pass {
		e.mode = Pass
		e.shaping.Store(nil)
	}
	drop := e.linksLocked()
	e.mu.Unlock()
	for _, l := range drop {
		l.drop(true)
	}
}

// Down closes the listener, so that new dials to [Endpoint.Addr] fail at
// once with ECONNREFUSED, and drops every live connection with a TCP reset
// on both sides. Down is idempotent and does nothing after Close.
func (e *Endpoint) Down() {
	e.mu.Lock()
	if e.closed || e.ln == nil {
		e.mu.Unlock()
		return
	}
	_ = e.ln.Close()
	e.ln = nil
	e.mode = Down
	e.shaping.Store(nil)
	drop := e.linksLocked()
	e.mu.Unlock()
	for _, l := range drop {
		l.drop(true)
	}
}

// Up makes a Down endpoint listen again on the same address, in [Pass]
// mode. While the OS reports the port as still in use (for example, taken
// meanwhile as the local port of some outgoing connection), Up retries for
// up to 5 seconds. On an endpoint that is not Down, Up is [Endpoint.Pass].
// It returns [ErrClosed] after Close, or the listen error (wrapped) if the
// port cannot be bound again; the endpoint then stays Down.
func (e *Endpoint) Up() error {
	deadline := time.Now().Add(upRetryTimeout)
	for {
		e.mu.Lock()
		closed, listening := e.closed, e.ln != nil
		e.mu.Unlock()
		if closed {
			return ErrClosed
		}
		if listening {
			e.Pass()
			return nil
		}
		ln, err := net.Listen("tcp4", e.addr)
		if err != nil {
			if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
				return fmt.Errorf("spannermetest: listen again on %s: %w", e.addr, err)
			}
			time.Sleep(upRetryInterval)
			continue
		}
		e.mu.Lock()
		if e.closed || e.ln != nil { // lost a race with Close or another Up
			e.mu.Unlock()
			_ = ln.Close()
			continue
		}
		e.ln = ln
		e.mode = Pass
		e.shaping.Store(nil)
		e.spawn(func() { e.acceptLoop(ln) })
		e.mu.Unlock()
		return nil
	}
}

// Close closes the listener and every connection (client and backend
// sides) and waits until every goroutine of the endpoint has returned,
// including ones blocked in a bandwidth-limit or latency wait. It is
// idempotent; every call waits, and every call returns nil. After Close the
// mode is [Closed] and dials to Addr are refused.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		e.mode = Closed
		if e.ln != nil {
			_ = e.ln.Close()
			e.ln = nil
		}
		e.cancel()
	}
	drop := e.linksLocked()
	e.mu.Unlock()
	for _, l := range drop {
		l.drop(true)
	}
	e.wg.Wait()
	return nil
}

// linksLocked returns the live links. e.mu must be held.
func (e *Endpoint) linksLocked() []*link {
	ls := make([]*link, 0, len(e.links))
	for l := range e.links {
		ls = append(ls, l)
	}
	return ls
}

// spawn runs f in a goroutine that Close waits for. The caller must either
// hold e.mu with the endpoint not closed, or itself run in a goroutine
// started by spawn: then wg.Add never races with Close's wg.Wait.
func (e *Endpoint) spawn(f func()) {
	e.wg.Add(1)
	e.running.Add(1)
	go func() {
		defer e.wg.Done()
		defer e.running.Add(-1)
		f()
	}()
}

// acceptLoop accepts connections on ln until ln is closed.
func (e *Endpoint) acceptLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient error such as EMFILE: pause, unless closed.
			select {
			case <-e.ctx.Done():
				return
			case <-time.After(acceptRetryInterval):
			}
			continue
		}
		e.admit(ln, c)
	}
}

// admit registers c, accepted on ln, and starts serving it.
func (e *Endpoint) admit(ln net.Listener, c net.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.ln != ln { // Down or Close raced with Accept
		closeConn(c, true)
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	l := &link{e: e, client: c, ctx: ctx, cancel: cancel}
	e.links[l] = struct{}{}
	e.accepted.Add(1)
	e.active.Add(1)
	if e.mode == Blackhole {
		l.blackholed.Store(true)
		// No backend: read and discard until the client goes away.
		e.spawn(func() { l.pump(c, nil, nil, nil, true) })
		return
	}
	if e.mode == DieYoung {
		e.spawn(l.goAway)
		return
	}
	e.spawn(l.connect)
}

// forget unregisters a dropped link.
func (e *Endpoint) forget(l *link) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.links[l]; ok {
		delete(e.links, l)
		e.active.Add(-1)
	}
}
