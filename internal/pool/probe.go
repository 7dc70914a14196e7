package pool

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
)

// prober runs a pool's probes on goroutines it tracks.
type prober struct {
	// Set by startHealth before the pool is shared, never changed after.
	timeout time.Duration
	probe   func(ctx context.Context, conn grpc.ClientConnInterface) error
	conn    *sentConn       // the pool's connection, as every probe of the pool is given it
	ctx     context.Context // cancelled by haltHealth
	cancel  context.CancelFunc

	mu      sync.Mutex // guards stopped and the Add of wg
	stopped bool
	wg      sync.WaitGroup // probe goroutines
}

// startHealth gives p its detector, before p is shared.
func (p *Pool) startHealth(o HealthOptions) {
	p.probes.timeout, p.probes.probe, p.overloadIsFailure = o.ProbeTimeout, o.Probe, o.OverloadIsFailure
	p.probes.conn = &sentConn{cc: bareConn{p.conn}} // not through the caller's interceptors (bare.go)
	p.probes.ctx, p.probes.cancel = context.WithCancel(context.Background())
	var probe func(uint64, health.Class)
	if o.Probe != nil {
		probe = p.probe
	}
	// The detector's idle-probe timer may fire before New returns (a short probe interval),
	// and the probe's goroutine reads p.health: it is set under probes.mu, which probe takes
	// before it starts that goroutine.
	p.probes.mu.Lock()
	p.health = health.New(health.Options{
		Config: o.Config, Clock: p.clock, Probe: probe,
		OnEvent: func(ev health.Event) { p.obs.Health(p, ev) },
	})
	p.probes.mu.Unlock()
	if o.Latency != nil {
		p.startLatency(*o.Latency)
	}
}

// probe runs probe seq of p, which must prove class c (health.WithProbeClass tells the probe
// function), on a goroutine of its own and reports its result to p's detector. A probe of a pool without a ready connection is skipped, and so is a failure
// seen once the pool has lost its ready connection: connectivity is the monitor's business.
func (p *Pool) probe(seq uint64, c health.Class) {
	p.probes.mu.Lock()
	defer p.probes.mu.Unlock()
	if p.probes.stopped {
		return
	}
	p.probes.wg.Add(1)
	go func() {
		defer p.probes.wg.Done()
		if p.State() != connectivity.Ready {
			p.health.ProbeDone(seq, health.ErrProbeSkipped, 0)
			return
		}
		ctx, cancel := context.WithTimeout(health.WithProbeClass(p.probes.ctx, c), p.probes.timeout)
		ctx, sent := withSentFlag(ctx, p.clock)
		start := p.clock.Now()
		err := p.probes.probe(ctx, p.probes.conn)
		end := p.clock.Now()
		cancel()
		if p.probes.ctx.Err() != nil {
			return // stopped: the detector is closed
		}
		at, wasSent := sent.at(start)
		switch {
		case err == nil:
		case !wasSent:
			// It never left: every stream of the pool's connections was busy until its
			// deadline (gRPC holds a new stream until the server's stream limit frees one).
			// A probe judges the endpoint, not the calls in front of it.
			err = fmt.Errorf("%w: no free stream on the endpoint's connections: %v", health.ErrProbeSkipped, err)
		case status.Code(err) == codes.DeadlineExceeded && at.Sub(start) > p.probes.timeout/2:
			// It waited more than half its timeout for a free stream: what was left is too
			// short to judge the endpoint by.
			err = fmt.Errorf("%w: it waited %v of its %v for a free stream: %v", health.ErrProbeSkipped,
				at.Sub(start).Round(time.Millisecond), p.probes.timeout, err)
		case p.State() != connectivity.Ready:
			err = fmt.Errorf("%w: the pool lost its ready connection: %v", health.ErrProbeSkipped, err)
		case status.Code(err) == codes.Canceled || health.Classify(err, false, false) == health.ConnectionLost:
			// Whatever the probe function: a probe cancelled by a frontend (RST_STREAM
			// CANCEL) or whose connection went away says nothing about the endpoint.
			err = fmt.Errorf("%w: %v", health.ErrProbeSkipped, err)
		}
		p.health.ProbeDone(seq, err, end.Sub(at))
	}()
}

// Check sends one probe of class c (health.WithProbeClass tells the probe function) through
// p now, on a goroutine p tracks, and gives done the status the endpoint answered it with
// (nil: OK), or the probe's own error when no call of the probe got a status other than OK
// (HealthOptions.Probe maps answers such as NOT_FOUND or RESOURCE_EXHAUSTED to nil: they
// prove the path): a question the detector did not ask, such as whether the endpoint refuses
// every call or only some (internal/steer asks it of an endpoint whose calls keep getting
// RESOURCE_EXHAUSTED). It returns false, and done is not called, when p has no probe (health
// off), its health is stopped, or it has no ready connection; otherwise done is called once,
// with context.Canceled when p's health stops while the probe runs. The probe takes
// HealthOptions.ProbeTimeout; the detector does not count it.
func (p *Pool) Check(c health.Class, done func(error)) bool {
	p.probes.mu.Lock()
	defer p.probes.mu.Unlock()
	if p.probes.probe == nil || p.probes.stopped || p.State() != connectivity.Ready {
		return false
	}
	p.probes.wg.Add(1)
	go func() {
		defer p.probes.wg.Done()
		ctx, cancel := context.WithTimeout(health.WithProbeClass(p.probes.ctx, c), p.probes.timeout)
		rc := &answerConn{cc: p.probes.conn}
		err := p.probes.probe(ctx, rc)
		cancel()
		switch a := rc.answer(); {
		case p.probes.ctx.Err() != nil:
			err = context.Canceled // stopped: whatever came back says nothing
		case a != nil:
			err = a
		}
		done(err)
	}()
	return true
}

// answerConn is the connection Check gives the probe: it keeps the first error status one of
// the probe's calls ended with, the endpoint's own answer, before the probe maps it.
type answerConn struct {
	cc grpc.ClientConnInterface
	mu sync.Mutex // guards err
	// err is the first error a call ended with; nil: none.
	err error
}

func (c *answerConn) keep(err error) {
	if err == nil || err == io.EOF {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

func (c *answerConn) answer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *answerConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	err := c.cc.Invoke(ctx, method, args, reply, opts...)
	c.keep(err)
	return err
}

func (c *answerConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := c.cc.NewStream(ctx, desc, method, opts...)
	if err != nil {
		c.keep(err)
		return nil, err
	}
	return &answerStream{ClientStream: cs, c: c}, nil
}

// answerStream is a stream of answerConn: it keeps the error its RecvMsg ends with.
type answerStream struct {
	grpc.ClientStream
	c *answerConn
}

func (s *answerStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.c.keep(err)
	return err
}

// haltHealth closes p's detector, stops its latency probes and cancels its probes,
// without waiting for them.
// Idempotent.
func (p *Pool) haltHealth() {
	if p.health == nil {
		return
	}
	p.health.Close()
	p.stopLatency()
	p.probes.mu.Lock()
	p.probes.stopped = true
	p.probes.mu.Unlock()
	p.probes.cancel()
}

// stopHealth halts p's health and waits for its probes to return. Idempotent.
func (p *Pool) stopHealth() {
	if p.health == nil {
		return
	}
	p.haltHealth()
	p.probes.wg.Wait()
}

// sentConn is the connection a probe function is given: the pool's for health probes, the
// pool's latency route for latency probes (latencyconn.go; one sentConn of each per pool, so
// that a probe function sees the same connection at every probe of its kind), recording, in the flag the
// probe's ctx carries (withSentFlag), whether the probe's request left the client. gRPC holds a new stream, in NewStream (or, under grpcgcp's
// session affinity, in the first SendMsg, where its interceptor opens the real stream) until
// the server's limit of concurrent streams on a connection leaves one free; a probe that waited
// there until its deadline was never sent, and says nothing of the endpoint, only of the calls
// ahead of it (grpc-go internal/transport/http2_client.go, NewStream's wait for stream quota).
// A request that was sent and then got no answer (a hung or blackholed endpoint) is sent.
type sentConn struct {
	cc grpc.ClientConnInterface
}

// sentKey is the context key of a probe's sentFlag.
type sentKey struct{}

// sentFlag records when a probe's request was first handed to a stream without error: the
// probe's latency runs from then, not from the time it waited for a free stream.
type sentFlag struct {
	clk    clock.Clock
	sentAt atomic.Pointer[time.Time] // nil until sent
}

// mark records now as the time the request left, unless it was recorded before.
func (f *sentFlag) mark() {
	if f.sentAt.Load() == nil {
		t := f.clk.Now()
		f.sentAt.CompareAndSwap(nil, &t)
	}
}

// at returns when the request left and true, or start and false if it has not (or went
// another way than through sentConn).
func (f *sentFlag) at(start time.Time) (time.Time, bool) {
	if t := f.sentAt.Load(); t != nil {
		return *t, true
	}
	return start, false
}

// withSentFlag returns ctx carrying a new flag that sentConn marks, on clk, once the probe's
// request was handed to a stream without error, and the flag.
func withSentFlag(ctx context.Context, clk clock.Clock) (context.Context, *sentFlag) {
	f := &sentFlag{clk: clk}
	return context.WithValue(ctx, sentKey{}, f), f
}

// unaryDesc is the stream description of a unary call, as grpc-go's Invoke uses.
var unaryDesc = &grpc.StreamDesc{}

// Invoke runs a unary call as grpc-go's own Invoke does (a stream, one message each way), so
// that it can tell whether the request was sent.
func (c *sentConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return invokeAsStream(ctx, c, method, args, reply, opts...)
}

// invokeAsStream runs a unary call on cc as a stream, as grpc-go's own Invoke does.
func invokeAsStream(ctx context.Context, cc grpc.ClientConnInterface, method string, args, reply any, opts ...grpc.CallOption) error {
	cs, err := cc.NewStream(ctx, unaryDesc, method, opts...)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(args); err != nil {
		return err
	}
	return cs.RecvMsg(reply)
}

// NewStream opens a stream whose first successful SendMsg sets the sent flag of ctx, if any.
func (c *sentConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := c.cc.NewStream(ctx, desc, method, opts...)
	if err != nil {
		return nil, err
	}
	sent, _ := ctx.Value(sentKey{}).(*sentFlag)
	if sent == nil {
		return cs, nil
	}
	return &sentStream{ClientStream: cs, sent: sent}, nil
}

// sentStream is a probe's stream: see sentConn.
type sentStream struct {
	grpc.ClientStream
	sent *sentFlag
}

func (s *sentStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err == nil {
		s.sent.mark()
	}
	return err
}
