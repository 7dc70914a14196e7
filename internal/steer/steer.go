package steer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/cooldown"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/retry"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// Env is what a Steerer needs of the connection it steers for.
type Env interface {
	// Table returns the routing table in force; nil after Close.
	Table() *route.Table
	// AvailableEndpoints returns the endpoints of group that its last verdicts find available, in
	// priority order.
	AvailableEndpoints(group string) []string
	// Begin is called as a resent stream of group is sent to p; it returns the call's start
	// time (pool.CallInfo.Start).
	Begin(ctx context.Context, p *pool.Pool, group string) time.Time
	// Rerouted counts a call sent elsewhere than its group's pick, for reason (one of the
	// Reroute values), or a retry the budget kept where it was (RerouteRefused).
	Rerouted(reason string)
	// Resent counts a stream of group resent at once from endpoint from to endpoint to.
	Resent(group, from, to string)
	// Cooling is told when endpoint's overload cooldown starts (or is extended into a new one)
	// for length; fromInfo says whether the length is the server's RetryInfo delay, repeats
	// how many cooldowns in a row the endpoint has had. Called with no lock held. The
	// connection must evaluate its groups' verdicts again (they read Steerer.Cooling and
	// Steerer.ConfirmedBy) and wake the calls waiting for a change; so must Cooled.
	Cooling(endpoint string, length time.Duration, fromInfo bool, repeats int)
	// Cooled is told when endpoint's cooldown of length ends, on the cooldown's timer.
	Cooled(endpoint string, length time.Duration)
	// Answered is told when endpoint by answered a call during the overload cooldowns of
	// cooling, which had not heard from it yet: a group of one of them that would use by
	// instead now moves away from it (Steerer.ConfirmedBy). Called with no lock held; the
	// connection evaluates its groups' verdicts again, as for Cooling.
	Answered(cooling []string, by string)
}

// Values of spannerme.AttrRerouteReason, given to Env.Rerouted.
const (
	RerouteRetry    = "retry_elsewhere"
	RerouteOverload = "overload_cooldown"
	RerouteRefused  = "refused_by_budget"
)

// Steerer steers retries, resends and calls to cooling endpoints for one connection. Init
// makes it ready; Close stops the cooldowns' timers. Safe for concurrent use: Steer and a
// first attempt's CallEnded take no lock and allocate nothing.
type Steerer struct {
	env     Env
	txns    *spannerreq.ReadOnlyTxns
	tiers   *route.Tiering
	cool    *cooldown.Set // overload cooldowns by endpoint
	budget  retry.Budget  // retry elsewhere's and the resend's budget
	retries retry.Memory  // failed attempts by request
	// steered, refused and skipped count the calls retry elsewhere and the overload cooldown
	// sent elsewhere, and the retries the budget kept; resent and resendRefused the streams
	// sent again at once and those the budget kept.
	steered, refused, skipped, resent, resendRefused atomic.Int64
	// queryScoped and shared count the RESOURCE_EXHAUSTED that cooled nothing: without a
	// RetryInfo (the query's), and shared by several endpoints (the database's).
	queryScoped, shared atomic.Int64
	// checked counts the confirmation probes the endpoint answered (checkOverload): the
	// streak that sent each was one query's.
	checked atomic.Int64
	// streaks counts, by endpoint, the RESOURCE_EXHAUSTED without RetryInfo in a row (no call
	// succeeded on it in between); streaking is how many are above zero, so that a success
	// costs one atomic load while none is. Guarded by streakMu.
	streakMu  sync.Mutex
	streaks   map[string]int
	streaking atomic.Int32
	// checks holds, by endpoint, the confirmation probe of a streak (checkOverload): in
	// flight, or when the last one ended. Guarded by streakMu.
	checks map[string]*check
	clock  clock.Clock
	// Resend is the pool.Resender of every stream (resendStream), made once by Init; nil turns
	// resending off (tests set it before any stream).
	Resend pool.Resender
}

// Counts are a Steerer's counters and its budget's tokens (spannerme.RetryStatus).
type Counts struct {
	Steered, Refused, OverloadSkipped, Resent, ResendRefused int64
	// OverloadQuery and OverloadShared count the RESOURCE_EXHAUSTED that cooled no endpoint
	// (NoteOverload): the query's, and the database's.
	OverloadQuery, OverloadShared int64
	// OverloadChecked counts the probes that found an endpoint answering after a streak of
	// RESOURCE_EXHAUSTED without RetryInfo (NoteOverload): the streak was one query's.
	OverloadChecked int64
	Tokens          float64
}

// Init prepares s: env reaches the connection, txns are the read-only transactions seen
// beginning (a resend may send a read in one), tiers counts a resent stream of a tiered
// group, clk runs the cooldowns.
func (s *Steerer) Init(env Env, txns *spannerreq.ReadOnlyTxns, tiers *route.Tiering, clk clock.Clock) {
	s.env, s.txns, s.tiers = env, txns, tiers
	if clk == nil {
		clk = clock.Real
	}
	s.clock = clk
	s.cool = cooldown.New(clk, s.cooldownEnded)
	s.Resend = s.resendStream
}

// Close stops the cooldowns' timers.
func (s *Steerer) Close() { s.cool.Close() }

// Cooling reports whether endpoint is cooling down after RESOURCE_EXHAUSTED: Steer sends its
// new calls elsewhere; its groups' verdicts count it only once confirmed (ConfirmedBy).
func (s *Steerer) Cooling(endpoint string) bool { return s.cool.Cooling(endpoint) }

// ConfirmedBy reports whether endpoint cools and one of by (the endpoints a group of it
// would move to) has answered a call since its cooldown began (cooldown.Set.ConfirmedBy):
// only then does the cooldown take it out of that group's choice. Until then Steer sends its
// new calls elsewhere, and their answers tell whether moving helps: an answer confirms the
// cooldown, a RESOURCE_EXHAUSTED with RetryInfo there shows the overload is the database's
// (NoteOverload), and no answer (an endpoint restarting, a path that hangs) leaves the group
// where it is.
func (s *Steerer) ConfirmedBy(endpoint string, by []string) bool {
	return s.cool.ConfirmedBy(endpoint, by)
}

// served records that endpoint answered a call, for the cooldowns in progress of other
// endpoints (cooldown.Set.Served), and tells Env.Answered when one had not heard from it.
func (s *Steerer) served(endpoint string) {
	if cooling := s.cool.Served(endpoint); cooling != nil {
		s.env.Answered(cooling, endpoint)
	}
}

// Cooldowns returns the cooldowns by endpoint, for their status and tests.
func (s *Steerer) Cooldowns() *cooldown.Set { return s.cool }

// Budget returns the retry budget, for tests that drain it.
func (s *Steerer) Budget() *retry.Budget { return &s.budget }

// Counts returns the counters and the budget's tokens.
func (s *Steerer) Counts() Counts {
	return Counts{Steered: s.steered.Load(), Refused: s.refused.Load(), OverloadSkipped: s.skipped.Load(),
		Resent: s.resent.Load(), ResendRefused: s.resendRefused.Load(), Tokens: s.budget.Tokens(),
		OverloadQuery: s.queryScoped.Load(), OverloadShared: s.shared.Load(), OverloadChecked: s.checked.Load()}
}

// CallEnded takes the outcome of one call of class c to method on p (a unary call, or a
// stream: pool Options.CallEnded) whose request ID is id ("" for none): the retry budget
// counts it, a retryable failure is remembered for the request's next attempt, and
// RESOURCE_EXHAUSTED starts p's endpoint's overload cooldown. A connection lost under the
// call (health.ConnectionLost) is none of these: it says nothing of the endpoint (internal/health
// counts it for nothing either), so its retry goes where the group sends it. A first attempt
// that succeeds on a full budget costs a string scan and one atomic load.
//
// A retry that succeeds on another endpoint than the one where its request last failed
// counts, for that endpoint's health, as the failure it would have met there again: retry
// elsewhere takes away the repeated failures by which health sees a fault of one endpoint
// (every Commit refused by E1 while its BeginTransactions pass: with each Commit retried on
// E1, most of E1's writes fail and it is ejected; with the retry on E2, half of them would,
// and a fault every write pays for would never eject E1).
func (s *Steerer) CallEnded(p *pool.Pool, id string, c health.Class, method string, err error) {
	if err == nil {
		if s.streaking.Load() != 0 {
			s.endStreak(p.Endpoint())
		}
		s.served(p.Endpoint())
		s.budget.Success()
		if key, retry := spannerreq.SplitRequestID(id); retry {
			if f, ok := s.retries.Take(key); ok && f.Endpoint != p.Endpoint() {
				if t := s.env.Table(); t != nil {
					if q := t.Pools[f.Endpoint]; q != nil {
						q.Observe(f.Class, f.Method, f.Err, false)
					}
				}
			}
		}
		return
	}
	if health.Classify(err, false, false) == health.ConnectionLost {
		return
	}
	if !spannerreq.RetryableByClient(err) {
		if c := status.Code(err); c != codes.Canceled && c != codes.DeadlineExceeded && c != codes.Unknown {
			s.budget.Success() // the backend answered
			s.served(p.Endpoint())
		}
		return
	}
	if spannerreq.Overloaded(err) && !s.noteOverload(p.Endpoint(), p, c, err) {
		if _, fromInfo := spannerreq.RetryDelay(err); !fromInfo {
			s.budget.Success() // the backend answered: the query's limit
		}
		return // the query's or the database's overload: retried where the group sends it
	}
	s.budget.Failure()
	if key, _ := spannerreq.SplitRequestID(id); key != "" {
		s.retries.Record(key, retry.Failed{Endpoint: p.Endpoint(), Class: c, Method: method, Err: err})
	}
}

// Steer returns the pool a call of group me that picked p goes to: p itself, unless p's
// endpoint is where the previous attempt of the call's request (id) failed, or p's
// endpoint is cooling down after RESOURCE_EXHAUSTED, and another endpoint of the group is
// available (Other); then that one, p being released. A first attempt while nothing
// cools costs a string scan and an atomic load, and allocates nothing.
func (s *Steerer) Steer(p *pool.Pool, me *multiendpoint.MultiEndpoint, id string) *pool.Pool {
	key, retry := spannerreq.SplitRequestID(id)
	if !retry && s.cool.Active() == 0 {
		return p
	}
	ep := p.Endpoint()
	if retry {
		if failed, ok := s.retries.FailedOn(key); ok && failed == ep {
			if !s.budget.Allows() {
				s.refused.Add(1)
				s.env.Rerouted(RerouteRefused)
				return p
			}
			if q, ok := s.Other(me, ep); ok {
				p.Release()
				s.steered.Add(1)
				s.env.Rerouted(RerouteRetry)
				return q
			}
			return p
		}
	}
	if s.cool.Cooling(ep) {
		if q, ok := s.Other(me, ep); ok {
			p.Release()
			s.skipped.Add(1)
			s.env.Rerouted(RerouteOverload)
			return q
		}
	}
	return p
}

// Other returns the acquired pool of another endpoint of group me than exclude: the
// first, in the group's priority order, of the endpoints its last verdicts find available
// whose pool is connected (READY) and not retired, one that is not cooling down after an
// overload first (an unconfirmed cooldown leaves its endpoint available: ConfirmedBy). False
// when there is none (the group's only available endpoint is exclude). It never waits and
// allocates only while an endpoint cools.
func (s *Steerer) Other(me *multiendpoint.MultiEndpoint, exclude string) (*pool.Pool, bool) {
	t := s.env.Table()
	if t == nil || t.Group(me.Name()) != me {
		return nil, false // closed, or a group an update replaced: no verdicts to read
	}
	available := s.env.AvailableEndpoints(me.Name())
	if s.cool.Active() > 0 {
		// A cooling endpoint stays available to its group until another answers
		// (ConfirmedBy); a call sent elsewhere goes to one that does not cool, when there is one.
		var warm []string
		for _, e := range available {
			if e != exclude && !s.cool.Cooling(e) {
				warm = append(warm, e)
			}
		}
		if q, ok := t.Other(me, warm, exclude); ok {
			return q, true
		}
	}
	return t.Other(me, available, exclude)
}

// NoteOverload judges a RESOURCE_EXHAUSTED status err of a call on endpoint and reports
// whether it is the endpoint's overload, which moving calls elsewhere relieves:
//
//   - without a RetryInfo delay (spannerreq.RetryDelay) it is the query's: Spanner answers so
//     a query over one of its limits, the Spanner client does not retry it and surfaces it
//     (cloud.google.com/go/spanner v1.96.1, retry.go), and another endpoint, which leads to
//     the same database, would answer the same. No cooldown; false. After OverloadStreak of
//     them in a row on the endpoint with no success between, the endpoint is asked whether
//     it refuses everything: the calls that ended on it may all be the same query (the one
//     a worker keeps sending while the endpoint's other calls are slow, or go elsewhere).
//     CallEnded sends one probe of the refused call's class (pool.Pool.Check), at most one at
//     a time per endpoint and one per CheckEvery: when the probe is refused with
//     RESOURCE_EXHAUSTED too, its frontend refuses every call, and the probe's error is
//     judged as below (without a RetryInfo: a cooldown of internal/cooldown's own length);
//     when it is answered, the refusals were the query's, and the streak starts again; a
//     probe the endpoint did not answer (a timeout, UNAVAILABLE) judges nothing.
//     Without a pool to probe (NoteOverload itself, a pool without health) the streak's
//     last refusal is judged as below;
//   - with one, when another endpoint had one within cooldown.SharedWindow (cooldown.Set.Shared),
//     the database sheds load on every endpoint: moving calls relieves nothing and costs them
//     the far endpoint's latency. No cooldown, and the cooldowns in progress end (their
//     calls come back); false. The first overload on one endpoint still cools it at once,
//     and the calls that cooldown sends elsewhere tell whether the overload is shared;
//   - otherwise the endpoint's overload cooldown (internal/cooldown) starts, or is extended
//     to the delay; true. When a cooldown starts Env.Cooling is told (the groups are
//     evaluated again: the verdicts read Cooling and ConfirmedBy), as Env.Cooled is when it ends
//     (cooldownEnded, on its timer).
func (s *Steerer) NoteOverload(endpoint string, err error) bool {
	return s.noteOverload(endpoint, nil, health.Calls, err)
}

// noteOverload is NoteOverload for a call of class c on pool p (nil: none to probe).
func (s *Steerer) noteOverload(endpoint string, p *pool.Pool, c health.Class, err error) bool {
	if _, fromInfo := spannerreq.RetryDelay(err); !fromInfo {
		if s.streak(endpoint) < OverloadStreak || (p != nil && s.checkOverload(endpoint, p, c)) {
			s.queryScoped.Add(1)
			return false
		}
	}
	return s.endpointOverload(endpoint, err)
}

// endpointOverload is NoteOverload's judgment of an overload that may be the endpoint's: the
// database's when another endpoint shares it, else the endpoint's cooldown.
func (s *Steerer) endpointOverload(endpoint string, err error) bool {
	delay, fromInfo := spannerreq.RetryDelay(err)
	if s.cool.Shared(endpoint) {
		s.shared.Add(1)
		s.cool.EndAll()
		return false
	}
	started, length, repeats := s.cool.Note(endpoint, delay, fromInfo)
	if started {
		s.env.Cooling(endpoint, length, fromInfo, repeats)
	}
	return true
}

// CheckEvery is the least time between two probes asking an endpoint whether it refuses every
// call (NoteOverload): a query refused again and again costs the endpoint one probe a second
// at most.
const CheckEvery = time.Second

// check is one endpoint's confirmation probe: inFlight while it runs, and when the last one
// ended.
type check struct {
	inFlight bool
	ended    time.Time
}

// checkOverload asks endpoint, through p, whether it refuses every call, unless a question is
// in flight or the last one ended within CheckEvery; it reports whether the refusal that
// completed the streak is left to that answer (false: p cannot be asked, judge it now). The
// probe goes down the refused call's path (class c: SpannerProbe sends a query for reads).
func (s *Steerer) checkOverload(endpoint string, p *pool.Pool, c health.Class) bool {
	s.streakMu.Lock()
	defer s.streakMu.Unlock()
	if s.checks == nil {
		s.checks = make(map[string]*check)
	}
	ck := s.checks[endpoint]
	if ck == nil {
		ck = &check{}
		s.checks[endpoint] = ck
	}
	if ck.inFlight || (!ck.ended.IsZero() && s.clock.Now().Sub(ck.ended) < CheckEvery) {
		return true
	}
	if !p.Check(c, func(err error) { s.checkAnswered(endpoint, ck, err) }) {
		return false
	}
	ck.inFlight = true
	return true
}

// checkAnswered takes the outcome of endpoint's confirmation probe ck. Refused with
// RESOURCE_EXHAUSTED, the overload is the endpoint's (or the database's: endpointOverload
// judges it). Answered otherwise (OK, or an answer such as NOT_FOUND), the refusals were the
// query's and the streak starts again. With no answer (UNAVAILABLE, a timeout, a lost
// connection, the pool stopped: health's business, not an overload's) nothing is judged, and
// the streak goes on: its next refusal asks again, CheckEvery after this one.
func (s *Steerer) checkAnswered(endpoint string, ck *check, err error) {
	refused := spannerreq.Overloaded(err)
	answered := !refused && !noAnswer(err)
	s.streakMu.Lock()
	ck.inFlight = false
	ck.ended = s.clock.Now()
	s.streakMu.Unlock()
	switch {
	case refused:
		s.endpointOverload(endpoint, err)
	case answered:
		s.checked.Add(1)
		s.endStreak(endpoint)
	}
}

// noAnswer reports whether a probe's err says the endpoint did not answer it.
func noAnswer(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// OverloadStreak is how many RESOURCE_EXHAUSTED without RetryInfo in a row, with no call
// succeeding on the endpoint in between, make them the endpoint's (its frontend refuses
// everything) rather than the queries' (NoteOverload).
const OverloadStreak = 3

// streak counts one more RESOURCE_EXHAUSTED without RetryInfo on endpoint and returns how
// many in a row it has had.
func (s *Steerer) streak(endpoint string) int {
	s.streakMu.Lock()
	defer s.streakMu.Unlock()
	if s.streaks == nil {
		s.streaks = make(map[string]int)
	}
	n := s.streaks[endpoint] + 1
	if n == 1 {
		s.streaking.Add(1)
	}
	s.streaks[endpoint] = n
	return n
}

// endStreak forgets endpoint's RESOURCE_EXHAUSTED in a row: a call succeeded on it.
func (s *Steerer) endStreak(endpoint string) {
	s.streakMu.Lock()
	defer s.streakMu.Unlock()
	if _, ok := s.streaks[endpoint]; ok {
		delete(s.streaks, endpoint)
		s.streaking.Add(-1)
	}
	// The endpoint's check is kept only while it runs or paces the next one: the map holds
	// the endpoints with a streak or a recent probe, not every address ever configured.
	if ck := s.checks[endpoint]; ck != nil && !ck.inFlight && s.clock.Now().Sub(ck.ended) >= CheckEvery {
		delete(s.checks, endpoint)
	}
}

// cooldownEnded is told by the cooldowns when endpoint's cooldown of length ends: it logs,
// and the groups are evaluated again.
func (s *Steerer) cooldownEnded(endpoint string, length time.Duration) {
	s.env.Cooled(endpoint, length)
}

// resendStream is the pool.Resender of every stream the GCPMultiEndpoint sends (Resend,
// made once in Init): it returns the acquired pool of another available endpoint
// of r's group and the replacement's CallInfo, counted in Status.Retries.Resent and the
// resends metric, or false (counted in Status.Retries.ResendRefused when the budget refused).
func (s *Steerer) resendStream(r pool.ResendRequest) (*pool.Pool, pool.CallInfo, bool) {
	if !resendOnError(r.Err) || !s.Resendable(r.Ctx, r.Req) {
		return nil, pool.CallInfo{}, false
	}
	t := s.env.Table()
	if t == nil {
		return nil, pool.CallInfo{}, false
	}
	me := t.Group(r.Call.Group)
	if me == nil {
		return nil, pool.CallInfo{}, false
	}
	from := r.Pool.Endpoint()
	if spannerreq.Overloaded(r.Err) && !s.cool.Cooling(from) {
		// NoteOverload (at the stream's end, before this) judged it the database's: the
		// client's retry goes where the group sends it.
		return nil, pool.CallInfo{}, false
	}
	if !s.budget.Allows() {
		s.resendRefused.Add(1)
		s.env.Rerouted(RerouteRefused)
		return nil, pool.CallInfo{}, false
	}
	q, ok := s.Other(me, from)
	if !ok {
		return nil, pool.CallInfo{}, false
	}
	s.resent.Add(1)
	s.env.Resent(me.Name(), from, q.Endpoint())
	start := s.env.Begin(r.Ctx, q, me.Name())
	tc := s.tiers.Begin(me, q, r.Method)
	return q, pool.CallInfo{Group: me.Name(), Tag: r.Call.Tag, Start: start, Class: r.Call.Class, First: tc.First()}, true
}

// resendOnError reports whether a stream that ended with err before any response message
// is resent: err is one the Spanner client retries (spannerreq.RetryableByClient), except
//
//   - RESOURCE_EXHAUSTED without a RetryInfo delay, which the client does not retry
//     (cloud.google.com/go/spanner v1.96.1, retry.go: "Retry ResourceExhausted error only if
//     there's a server delay in the trailer"): its caller sees it, as before. With a delay
//     the resend does not wait for it: the delay is the failed endpoint's, which its
//     overload cooldown keeps out of the group's choice meanwhile, and the resend goes
//     elsewhere;
//   - a connection lost under the stream (health.ConnectionLost: a reset, GOAWAY, the
//     transport closing), which says nothing of the endpoint: the client's retry goes where
//     the group sends it, as the pool reconnects, as retry elsewhere does (CallEnded).
func resendOnError(err error) bool {
	if !spannerreq.RetryableByClient(err) {
		return false
	}
	if spannerreq.Overloaded(err) {
		_, ok := spannerreq.RetryDelay(err)
		return ok
	}
	return health.Classify(err, false, false) != health.ConnectionLost
}

// Resendable reports whether req, the request of a streaming query or read sent with ctx,
// may be sent again at once to another endpoint after its stream failed before any response
// message: it only reads. Those are
//
//   - what hedging may send twice (spannerreq.ReadOnlyTxns.Hedgeable): a query or read in a
//     single-use read-only transaction or with no transaction selector (a temporary
//     read-only transaction), or naming by ID a read-only transaction seen to begin; none
//     of them partitioned, DML, or carrying the route-to-leader header;
//   - a query or read that begins a read-only transaction inline (TransactionSelector.begin
//     with read_only options), not partitioned, without route-to-leader: the failed attempt
//     delivered no message, so the client never learnt a transaction from it; the resend
//     begins one, whose ID the client learns from the resend's first message, as from its
//     own retry. A transaction the failed attempt may have begun in the database is a
//     read-only one, which takes no locks (Spanner docs, Transactions overview,
//     https://cloud.google.com/spanner/docs/transactions: read-only transactions "do not
//     take locks"), and is never used.
//
// Everything else is not: a read-write transaction's reads take locks, DML and batch DML
// write (their seqno makes a replay within the transaction idempotent, but only the client
// knows whether it replays), Commit, Rollback, BeginTransaction and partitioned calls are
// unary or tied to state this layer does not follow.
func (s *Steerer) Resendable(ctx context.Context, req any) bool {
	if s.txns.Hedgeable(ctx, req) {
		return true
	}
	if _, ok := spannerreq.BeginsReadOnly(req); !ok {
		return false
	}
	switch r := req.(type) {
	case *spannerpb.ExecuteSqlRequest:
		if len(r.GetPartitionToken()) != 0 {
			return false
		}
	case *spannerpb.ReadRequest:
		if len(r.GetPartitionToken()) != 0 {
			return false
		}
	}
	for _, v := range metadata.ValueFromOutgoingContext(ctx, spannerreq.RouteToLeaderHeader) {
		if v == "true" {
			return false
		}
	}
	return true
}
