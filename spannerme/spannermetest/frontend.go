package spannermetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// GoogleFrontendMaxConcurrentStreams is the number of concurrent streams a
// Google frontend allows on one HTTP/2 connection (its
// SETTINGS_MAX_CONCURRENT_STREAMS), for [WithMaxConcurrentStreams]. A gRPC
// client whose connection has that many calls in progress makes a new call
// on it wait until one ends.
const GoogleFrontendMaxConcurrentStreams = 100

// keepaliveMinTime is the shortest interval between a client's keepalive
// pings the frontend accepts; below gRPC clients' 10 s minimum
// (keepalive.ClientParameters), so that no client is refused.
const keepaliveMinTime = time.Second

// FrontendMode is what a [Frontend] does with the calls that start while it
// is in that mode. The zero value is [FrontendPass].
type FrontendMode int

const (
	// FrontendPass forwards every call to the backend (the default).
	FrontendPass FrontendMode = iota
	// FrontendFailAll fails every call with one status code; see
	// [Frontend.FailAll].
	FrontendFailAll
	// FrontendFailFraction fails a fraction of the calls with one status
	// code and forwards the others; see [Frontend.FailFraction].
	FrontendFailFraction
	// FrontendHang accepts every call and never answers it; see
	// [Frontend.Hang].
	FrontendHang
	// FrontendClosed is the mode after [Frontend.Close]; it is final.
	FrontendClosed
	// FrontendFailMethods fails the calls to some methods with one status
	// code and forwards the others; see [Frontend.FailMethods].
	FrontendFailMethods
)

// String returns the lower-case name of the mode ("pass", "fail-all",
// "fail-fraction", "hang", "closed", "fail-methods"), or "FrontendMode(n)"
// for an unknown value.
func (m FrontendMode) String() string {
	switch m {
	case FrontendPass:
		return "pass"
	case FrontendFailAll:
		return "fail-all"
	case FrontendFailFraction:
		return "fail-fraction"
	case FrontendHang:
		return "hang"
	case FrontendClosed:
		return "closed"
	case FrontendFailMethods:
		return "fail-methods"
	}
	return fmt.Sprintf("FrontendMode(%d)", int(m))
}

// CallStats count a [Frontend]'s calls, for one method or in total.
//
// Every call is counted once in Received when it reaches the frontend and,
// after the added latency ([Frontend.SetLatency]), once in exactly one of
// Forwarded, Failed and Hung; a call whose caller gives up (or that Close
// ends) during the added latency is counted in Received only. A call the
// client could not start (for example one waiting for a stream under
// [WithMaxConcurrentStreams]) is not counted at all.
type CallStats struct {
	// Received is the number of calls that reached the frontend.
	Received int64
	// Forwarded is the number of calls passed to the backend, whatever the
	// backend answered (a backend error is the backend's answer, forwarded),
	// including calls that failed because the backend was unreachable.
	Forwarded int64
	// Failed is the number of calls failed by injection ([Frontend.FailAll],
	// [Frontend.FailFraction]); the backend never saw them.
	Failed int64
	// Hung is the number of calls held by [Frontend.Hang]; the backend never
	// saw them.
	Hung int64
}

// FrontendStats are a [Frontend]'s counters since [NewFrontend] or the last
// [Frontend.ResetStats]. The embedded CallStats are the totals over every
// method; the call counters (totals and Methods) are one consistent
// snapshot.
type FrontendStats struct {
	CallStats
	// Methods holds the counters of each method that received a call, by
	// full method name ("/google.spanner.v1.Spanner/ExecuteStreamingSql").
	// It is a fresh map the caller may keep and modify.
	Methods map[string]CallStats
	// Accepted is the number of client connections (HTTP/2) accepted since
	// NewFrontend; ResetStats does not clear it.
	Accepted int64
	// Active is the number of accepted client connections not yet closed.
	Active int64
}

// FrontendOption configures a [Frontend] at [NewFrontend].
type FrontendOption func(*frontendOptions)

type frontendOptions struct {
	record        int // WithRequestRecording's limit; 0: off
	attempts      int // WithAttemptRecording's limit; 0: off
	maxStreams    uint32
	maxAge, grace time.Duration
	seed          uint64
	seeded        bool
	serverOptions []grpc.ServerOption
	errs          []error
}

// WithMaxConcurrentStreams limits each client connection to n concurrent
// calls (streams), as HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS, through
// grpc.MaxConcurrentStreams. A gRPC client does not open more streams than
// that on one connection: further calls on it wait, on the client, until a
// call ends. [GoogleFrontendMaxConcurrentStreams] is the limit of Google
// frontends. Zero, the default, is gRPC's default: no limit.
func WithMaxConcurrentStreams(n uint32) FrontendOption {
	return func(o *frontendOptions) { o.maxStreams = n }
}

// WithMaxConnectionAge makes the frontend end each client connection after
// it has existed for age, through keepalive.ServerParameters: gRPC sends an
// HTTP/2 GOAWAY, so that the client opens a new connection for new calls,
// and closes the connection once its calls have ended, or grace after the
// GOAWAY, whichever comes first. gRPC adds a random jitter of ±10% to age.
// Zero age, the default, means connections are never aged out, and grace is
// then ignored; zero grace means calls in progress are never cut. Negative
// durations make
// [NewFrontend] fail.
func WithMaxConnectionAge(age, grace time.Duration) FrontendOption {
	return func(o *frontendOptions) {
		if age < 0 || grace < 0 {
			o.errs = append(o.errs, fmt.Errorf("WithMaxConnectionAge(%v, %v): negative duration", age, grace))
			return
		}
		o.maxAge, o.grace = age, grace
	}
}

// WithSeed seeds the random choice of [Frontend.FailFraction] (and of
// [Frontend.SetLatencyFraction]), so that a
// test is reproducible: after each FailFraction call, whether the n-th call
// that starts is failed depends only on the seed, n and the fraction. The
// default is a random seed.
func WithSeed(seed int64) FrontendOption {
	return func(o *frontendOptions) { o.seed, o.seeded = uint64(seed), true }
}

// WithRequestRecording makes the frontend keep a copy of each request message it forwards
// to the backend, up to limit messages (later ones are not kept), for [Frontend.Requests]:
// a test can then assert what each call carried, for example which Spanner requests had
// DirectedReadOptions. Calls failed or held by the frontend send it no message to keep.
// Without it nothing is kept. A limit below 1 makes [NewFrontend] fail.
func WithRequestRecording(limit int) FrontendOption {
	return func(o *frontendOptions) {
		if limit < 1 {
			o.errs = append(o.errs, fmt.Errorf("WithRequestRecording(%d): limit below 1", limit))
			return
		}
		o.record = limit
	}
}

// RecordedRequest is one request message a [Frontend] forwarded
// ([WithRequestRecording]).
type RecordedRequest struct {
	// Method is the call's full method name, e.g.
	// "/google.spanner.v1.Spanner/ExecuteStreamingSql".
	Method string
	// Message is the request message as it crossed the wire: for the Spanner API, a
	// serialized protocol buffer to proto.Unmarshal into the method's request type
	// (spannerpb.ExecuteSqlRequest and so on). It is the caller's copy.
	Message []byte
}

// WithServerOptions adds options to the frontend's grpc.Server, after its
// own, so they can override them. The frontend's own are: the
// unknown-service handler and codec that forward calls (replacing them
// breaks forwarding), no message size limits (the caller and the backend
// enforce theirs), a keepalive enforcement policy that accepts pings every
// second, also on connections without calls (grpc-go's default would end
// connections whose client pings more often than every 5 minutes; override
// it with grpc.KeepaliveEnforcementPolicy to test that), and the options
// above.
func WithServerOptions(opts ...grpc.ServerOption) FrontendOption {
	return func(o *frontendOptions) { o.serverOptions = append(o.serverOptions, opts...) }
}

// Frontend is a fake Google frontend: a gRPC server on 127.0.0.1 at which
// HTTP/2 ends, as it ends at the frontend behind a PSC endpoint, and which
// forwards every call, whatever its service and method, to one backend
// address. Unlike [Endpoint], which fails the way networks fail, a Frontend
// fails the way a frontend or the service behind it fails: calls fail
// (FailAll, FailFraction) or are never answered (Hang) while the client's
// connections stay up. Create it with [NewFrontend] or [NewFrontendTB]; the
// zero value is not usable. All methods are safe for concurrent use.
//
// Forwarding is transparent: request messages, request metadata (except the
// HTTP/2 headers gRPC sets itself: user-agent, content-type,
// grpc-accept-encoding, :authority), the deadline, response headers,
// messages, trailers and the backend's status (code, message and details)
// pass unchanged, for unary, server-streaming, client-streaming and
// bidirectional calls. Messages are passed as opaque bytes, never decoded;
// compressed requests are decompressed at the frontend and forwarded
// uncompressed (a compressor must be registered in the process, as for any
// gRPC server).
// A call whose caller cancels it, or whose deadline passes, is cancelled on
// the backend too. Every call goes through one shared backend connection
// (plaintext gRPC), dialed when the first call is forwarded; if the backend
// is unreachable, calls fail with the client's error for it (UNAVAILABLE).
//
// A mode applies to the calls that start after it is set; a call keeps the
// mode (and the latency) it started with.
type Frontend struct {
	backend string
	addr    string

	srv       *grpc.Server
	conn      *grpc.ClientConn // to the backend, shared by every call
	ln        *trackingListener
	serveDone chan struct{} // closed when srv.Serve has returned
	done      chan struct{} // closed by Close

	seed uint64

	// mu serializes the setters (mode changes, SetLatency, Close) and
	// guards writes to behavior; the call path only loads behavior.
	mu       sync.Mutex
	behavior atomic.Pointer[behavior]  // never nil
	slow     atomic.Pointer[slowCalls] // SetLatencyFraction; nil: off

	// statsMu guards total, methods and recorded.
	statsMu  sync.Mutex
	total    CallStats
	methods  map[string]*CallStats
	recorded []RecordedRequest
	record   int // WithRequestRecording's limit; 0: off
	// attempts are the calls recorded by WithAttemptRecording, up to attemptLimit (0: off).
	attempts     []Attempt
	attemptLimit int

	// pumps counts the goroutines that copy request messages to the
	// backend; one may outlive its call briefly (until gRPC ends the
	// server stream), and Close waits for them.
	pumps sync.WaitGroup

	closeOnce sync.Once
}

// behavior is what the frontend does with a call that starts now. It is
// immutable once stored.
type behavior struct {
	mode     FrontendMode
	code     codes.Code      // FailAll, FailFraction, FailMethods
	fraction float64         // FailFraction
	rng      *lockedRand     // FailFraction
	methods  map[string]bool // FailMethods; never modified once stored
	latency  time.Duration
	// retryDelay: injected errors carry a RetryInfo with this delay (SetRetryDelay); 0: none.
	retryDelay time.Duration
}

// lockedRand is a random source shared by the calls of one FailFraction.
type lockedRand struct {
	mu sync.Mutex // guards r
	r  *rand.Rand
}

// below reports whether the next random number in [0, 1) is below p.
func (l *lockedRand) below(p float64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64() < p
}

// NewFrontend starts a [Frontend] in [FrontendPass] mode, listening on
// 127.0.0.1 with a port chosen by the OS and forwarding to backend
// ("host:port", plaintext gRPC). The backend is dialed when a call is first
// forwarded, so it need not be up yet. It returns an error if backend is
// not a host:port address, if an option is invalid, or if listening fails.
// The caller must call [Frontend.Close].
func NewFrontend(backend string, opts ...FrontendOption) (*Frontend, error) {
	if _, _, err := net.SplitHostPort(backend); err != nil {
		return nil, fmt.Errorf("spannermetest: frontend backend %q: %w", backend, err)
	}
	var o frontendOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := errors.Join(o.errs...); err != nil {
		return nil, fmt.Errorf("spannermetest: frontend options: %w", err)
	}
	if !o.seeded {
		o.seed = rand.Uint64()
	}
	conn, err := grpc.NewClient("passthrough:///"+backend,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The caller and the backend enforce their own limits.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32), grpc.MaxCallSendMsgSize(math.MaxInt32)),
	)
	if err != nil {
		return nil, fmt.Errorf("spannermetest: frontend backend %q: %w", backend, err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("spannermetest: listen: %w", err)
	}
	f := &Frontend{
		backend:   backend,
		addr:      ln.Addr().String(),
		conn:      conn,
		ln:        newTrackingListener(ln),
		serveDone: make(chan struct{}),
		done:      make(chan struct{}),
		seed:      o.seed,
		methods:   make(map[string]*CallStats),
		record:    o.record,

		attemptLimit: o.attempts,
	}
	f.behavior.Store(&behavior{mode: FrontendPass})
	sopts := []grpc.ServerOption{
		grpc.UnknownServiceHandler(f.handle),
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.MaxRecvMsgSize(math.MaxInt32),
		grpc.MaxSendMsgSize(math.MaxInt32),
		// Stop waits for the handlers, so that Close leaves no goroutine.
		grpc.WaitForHandlers(true),
	}
	// Accept keepalive pings as often as gRPC clients may send them (every
	// 10 s at most, also without calls), as Google frontends accept the
	// Spanner client's 2-minute pings; grpc-go's default policy (one ping per
	// 5 minutes, none without calls; internal/transport/defaults.go) would
	// end such connections with GOAWAY "too_many_pings".
	sopts = append(sopts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		MinTime: keepaliveMinTime, PermitWithoutStream: true}))
	if o.maxStreams > 0 {
		sopts = append(sopts, grpc.MaxConcurrentStreams(o.maxStreams))
	}
	if o.maxAge > 0 {
		sopts = append(sopts, grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      o.maxAge,
			MaxConnectionAgeGrace: o.grace, // gRPC reads zero as infinite
		}))
	}
	sopts = append(sopts, o.serverOptions...)
	f.srv = grpc.NewServer(sopts...)
	go func() {
		defer close(f.serveDone)
		_ = f.srv.Serve(f.ln)
	}()
	return f, nil
}

// NewFrontendTB is [NewFrontend] for tests: it fails tb with Fatal on error
// and registers [Frontend.Close] with tb.Cleanup.
func NewFrontendTB(tb testing.TB, backend string, opts ...FrontendOption) *Frontend {
	tb.Helper()
	f, err := NewFrontend(backend, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	return f
}

// Addr returns the frontend's listening address, "127.0.0.1:port", for the
// whole life of the frontend.
func (f *Frontend) Addr() string { return f.addr }

// Backend returns the backend address given to [NewFrontend].
func (f *Frontend) Backend() string { return f.backend }

// Mode returns the current mode.
func (f *Frontend) Mode() FrontendMode { return f.behavior.Load().mode }

// Latency returns the latency set by [Frontend.SetLatency]: 0 if none, and after Close.
// Safe for concurrent use.
func (f *Frontend) Latency() time.Duration { return f.behavior.Load().latency }

// Pass makes the frontend forward the calls that start from now on. Calls
// held by an earlier [Frontend.Hang] stay held. Pass does nothing after
// Close.
func (f *Frontend) Pass() {
	f.update(func(b *behavior) { *b = behavior{mode: FrontendPass, latency: b.latency, retryDelay: b.retryDelay} })
}

// FailAll makes the frontend fail every call that starts from now on with
// code and the message "spannermetest: <code> injected by frontend <addr>",
// as a frontend does when the service behind it is unavailable
// (codes.Unavailable) or overloaded (codes.ResourceExhausted). Connections
// stay up; the backend sees none of these calls. It returns an error, and
// changes nothing, if code is codes.OK or not a gRPC code (above
// codes.Unauthenticated). It does nothing after Close.
func (f *Frontend) FailAll(code codes.Code) error {
	if err := checkFailCode(code); err != nil {
		return fmt.Errorf("spannermetest: FailAll: %w", err)
	}
	f.update(func(b *behavior) {
		*b = behavior{mode: FrontendFailAll, code: code, latency: b.latency, retryDelay: b.retryDelay}
	})
	return nil
}

// FailFraction makes the frontend fail a random fraction (0 to 1) of the
// calls that start from now on with code, as [Frontend.FailAll] does, and
// forward the others. Each call is failed independently with probability
// fraction, drawn in the order calls reach the frontend from a source
// seeded anew by each FailFraction call (see [WithSeed]); of n calls, the
// number failed is binomial(n, fraction). FailFraction(0, code) forwards
// every call; FailFraction(1, code) fails every call. It returns an error,
// and changes nothing, if fraction is outside [0, 1] or NaN or if code is
// invalid as for FailAll. It does nothing after Close.
func (f *Frontend) FailFraction(fraction float64, code codes.Code) error {
	if !(fraction >= 0 && fraction <= 1) {
		return fmt.Errorf("spannermetest: FailFraction: fraction %v not in [0, 1]", fraction)
	}
	if err := checkFailCode(code); err != nil {
		return fmt.Errorf("spannermetest: FailFraction: %w", err)
	}
	rng := &lockedRand{r: rand.New(rand.NewPCG(f.seed, 0))}
	f.update(func(b *behavior) {
		*b = behavior{mode: FrontendFailFraction, code: code, fraction: fraction, rng: rng, latency: b.latency, retryDelay: b.retryDelay}
	})
	return nil
}

// FailMethods makes the frontend fail every call to one of methods that
// starts from now on with code, as [Frontend.FailAll] does, and forward the
// calls to every other method: a gray failure, such as a region whose
// frontend refuses commits ("/google.spanner.v1.Spanner/Commit") while reads
// pass. Methods are full gRPC method names ("/service/method"). It returns an
// error, and changes nothing, if methods is empty, a name is not of that
// form, or code is invalid as for FailAll. It does nothing after Close.
func (f *Frontend) FailMethods(code codes.Code, methods ...string) error {
	if err := checkFailCode(code); err != nil {
		return fmt.Errorf("spannermetest: FailMethods: %w", err)
	}
	if len(methods) == 0 {
		return errors.New("spannermetest: FailMethods: no method")
	}
	set := make(map[string]bool, len(methods))
	for _, m := range methods {
		if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 || strings.HasSuffix(m, "/") || strings.HasPrefix(m, "//") {
			return fmt.Errorf("spannermetest: FailMethods: %q is not a full method name (/service/method)", m)
		}
		set[m] = true
	}
	f.update(func(b *behavior) {
		*b = behavior{mode: FrontendFailMethods, code: code, methods: set, latency: b.latency, retryDelay: b.retryDelay}
	})
	return nil
}

// Hang makes the frontend accept every call that starts from now on and
// never answer it: no response header, no message, no status, as a
// frontend does whose backend stalls. A held call ends only when its caller
// gives up (cancellation or deadline; the caller sees its own
// DEADLINE_EXCEEDED or CANCELED), when its connection is dropped
// ([Frontend.DropConnections]) or when the frontend closes. Changing the
// mode does not release held calls: a later Pass forwards only the calls
// that start after it. The backend sees none of these calls. Hang does
// nothing after Close.
func (f *Frontend) Hang() {
	f.update(func(b *behavior) { *b = behavior{mode: FrontendHang, latency: b.latency, retryDelay: b.retryDelay} })
}

// SetLatency delays every call that starts from now on by d before the
// mode acts on it: before it is forwarded, failed or held. The delay is
// added once per call, to the time until the first response (or the
// injected error), not to each message. It composes with every mode. Zero
// or negative means no added latency, the default. SetLatency does nothing
// after Close.
func (f *Frontend) SetLatency(d time.Duration) {
	d = max(d, 0)
	f.update(func(b *behavior) { b.latency = d })
}

// update stores a modified copy of the behavior, unless closed.
func (f *Frontend) update(modify func(*behavior)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.behavior.Load()
	if old.mode == FrontendClosed {
		return
	}
	b := *old
	modify(&b)
	f.behavior.Store(&b)
}

// checkFailCode returns an error unless code is a gRPC error code.
func checkFailCode(code codes.Code) error {
	if code == codes.OK || code > codes.Unauthenticated {
		return fmt.Errorf("code %v is not a gRPC error code", code)
	}
	return nil
}

// Stats returns the frontend's counters; see [FrontendStats].
func (f *Frontend) Stats() FrontendStats {
	f.statsMu.Lock()
	st := FrontendStats{CallStats: f.total, Methods: make(map[string]CallStats, len(f.methods))}
	for m, c := range f.methods {
		st.Methods[m] = *c
	}
	f.statsMu.Unlock()
	st.Accepted, st.Active = f.ln.accepted.Load(), f.ln.active.Load()
	return st
}

// ResetStats sets the call counters (totals and per method) to zero and
// forgets the recorded requests ([Frontend.Requests]) and attempts
// ([Frontend.Attempts]). Calls in progress are
// counted afresh only for what happens to them after the reset. Connection
// counters are kept.
func (f *Frontend) ResetStats() {
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	f.total = CallStats{}
	clear(f.methods)
	f.recorded = nil
	f.attempts = nil
}

// Requests returns the request messages recorded since [NewFrontend] or the
// last [Frontend.ResetStats], in the order the frontend forwarded them (the
// messages of one call in their order), up to the limit of
// [WithRequestRecording]; nil without it. A message is recorded before it
// is sent to the backend, so a call that has had its response has every
// message it sent before recorded. The slice and its messages are fresh
// copies the caller may keep and modify.
func (f *Frontend) Requests() []RecordedRequest {
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	if f.recorded == nil {
		return nil
	}
	out := make([]RecordedRequest, len(f.recorded))
	for i, r := range f.recorded {
		out[i] = RecordedRequest{Method: r.Method, Message: append([]byte(nil), r.Message...)}
	}
	return out
}

// recordRequest keeps a copy of a request message of method, within the
// limit of WithRequestRecording.
func (f *Frontend) recordRequest(method string, m *rawFrame) {
	if f.record == 0 {
		return
	}
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	if len(f.recorded) < f.record {
		f.recorded = append(f.recorded, RecordedRequest{Method: method, Message: m.data.Materialize()})
	}
}

// count adds one to the counter that field selects, for method and in
// total.
func (f *Frontend) count(method string, field func(*CallStats) *int64) {
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	c := f.methods[method]
	if c == nil {
		c = &CallStats{}
		f.methods[method] = c
	}
	*field(c)++
	*field(&f.total)++
}

func received(c *CallStats) *int64  { return &c.Received }
func forwarded(c *CallStats) *int64 { return &c.Forwarded }
func failed(c *CallStats) *int64    { return &c.Failed }
func hung(c *CallStats) *int64      { return &c.Hung }

// DropConnections closes every client connection the frontend has
// accepted, without GOAWAY, as a frontend that restarts does. Calls in
// progress on them end with UNAVAILABLE on the client, and held calls end;
// the frontend keeps accepting new connections in its current mode.
// DropConnections does nothing after Close.
func (f *Frontend) DropConnections() { f.ln.closeConns(-1) }

// DropSomeConnections closes up to n of the client connections the frontend has accepted,
// as [Frontend.DropConnections] closes them all (a load balancer recycling some of a
// frontend's connections), and returns how many it closed; which ones is unspecified.
// [FrontendStats] Active tells how many there are. n <= 0 closes none.
// DropSomeConnections does nothing after Close.
func (f *Frontend) DropSomeConnections(n int) int {
	if n <= 0 {
		return 0
	}
	return f.ln.closeConns(n)
}

// Close stops the frontend: it closes the listener and every client
// connection (calls in progress end with UNAVAILABLE on the client, held
// calls included), cancels their backend calls, closes the backend
// connection and waits until every goroutine of the frontend has returned.
// It is idempotent; every call waits, and every call returns nil. After
// Close the mode is [FrontendClosed] and dials to Addr are refused.
func (f *Frontend) Close() error {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		f.behavior.Store(&behavior{mode: FrontendClosed})
		f.mu.Unlock()
		close(f.done)
		f.srv.Stop() // closes the listener and connections, waits for handlers
		<-f.serveDone
		f.pumps.Wait()
		_ = f.conn.Close()
	})
	return nil
}

// handle serves every call the frontend receives.
func (f *Frontend) handle(_ any, ss grpc.ServerStream) (err error) {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "spannermetest: frontend: no method name")
	}
	ctx := ss.Context()
	b := f.behavior.Load()
	injected := false
	if f.attemptLimit > 0 {
		md, _ := metadata.FromIncomingContext(ctx)
		defer func() { f.recordAttempt(method, md, err, injected) }()
	}
	f.count(method, received)
	fail := b.mode == FrontendFailAll || (b.mode == FrontendFailFraction && b.rng.below(b.fraction)) ||
		(b.mode == FrontendFailMethods && b.methods[method])
	if latency := b.latency + f.slowDelay(); latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		case <-f.done:
			t.Stop()
			return status.Error(codes.Unavailable, "spannermetest: frontend closed")
		}
	}
	switch {
	case fail:
		f.count(method, failed)
		injected = true
		return f.injectedError(b)
	case b.mode == FrontendHang:
		f.count(method, hung)
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-f.done:
			return status.Error(codes.Unavailable, "spannermetest: frontend closed")
		}
	}
	f.count(method, forwarded)
	return f.forward(ctx, method, ss)
}

// forward passes one call to the backend and its answer back to the
// caller.
func (f *Frontend) forward(ctx context.Context, method string, ss grpc.ServerStream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the backend call when this call ends
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	callOpts := []grpc.CallOption{grpc.ForceCodecV2(rawCodec{})}
	if sub := contentSubtype(md.Get("content-type")); sub != "" {
		callOpts = append(callOpts, grpc.CallContentSubtype(sub))
	}
	// gRPC sets these itself; grpc-accept-encoding would be sent twice.
	for _, k := range []string{":authority", "content-type", "user-agent", "grpc-accept-encoding"} {
		delete(md, k)
	}
	cs, err := f.conn.NewStream(metadata.NewOutgoingContext(ctx, md),
		&grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, callOpts...)
	if err != nil {
		return err
	}

	// Requests: caller → backend, until the caller half-closes. This
	// goroutine may still wait in RecvMsg after the handler returns, until
	// gRPC ends the server stream.
	f.pumps.Add(1)
	go func() {
		defer f.pumps.Done()
		for {
			m := &rawFrame{}
			if err := ss.RecvMsg(m); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel() // the caller is gone
				}
				return
			}
			f.recordRequest(method, m)
			err := cs.SendMsg(m)
			m.free()
			if err != nil {
				return // the backend call ended; RecvMsg below has its status
			}
		}
	}()

	// Responses: backend → caller. Header returns nil for a response
	// without headers (trailers only): then none are sent either.
	if hdr, _ := cs.Header(); hdr != nil {
		if err := ss.SendHeader(hdr); err != nil {
			return err
		}
	}
	for {
		m := &rawFrame{}
		err := cs.RecvMsg(m)
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // the backend's status, unchanged
		}
		err = ss.SendMsg(m)
		m.free()
		if err != nil {
			return err
		}
	}
}

// contentSubtype returns the subtype of a gRPC content-type
// ("application/grpc+json" → "json"), or "" for none.
func contentSubtype(values []string) string {
	if len(values) == 0 {
		return ""
	}
	rest, ok := strings.CutPrefix(values[0], "application/grpc")
	if !ok || rest == "" {
		return ""
	}
	if rest[0] == '+' || rest[0] == ';' {
		return rest[1:]
	}
	return ""
}
