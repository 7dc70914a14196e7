package hedge

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/spannerme/spanner-multiendpoint/internal/callinfo"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// Env is what a Hedger needs of the connection it hedges for.
type Env interface {
	// Other returns the acquired pool of another available, connected endpoint of group me
	// than exclude; false when there is none. It never waits.
	Other(me *multiendpoint.MultiEndpoint, exclude string) (*pool.Pool, bool)
	// Begin is called as a stream of group is sent to p, on the stream's context; it returns
	// the call's start time (pool.CallInfo.Start).
	Begin(ctx context.Context, p *pool.Pool, group string) time.Time
}

// Hedger is the hedging of a connection's groups: each hedging group's settings, budget,
// adaptive delay and counts, and one Scheduler for the hedges of every armed stream. Init
// makes it ready; Close stops the Scheduler. Safe for concurrent use: For, Group and Groups
// take no lock and allocate nothing.
type Hedger struct {
	env    Env
	txns   *spannerreq.ReadOnlyTxns
	groups atomic.Pointer[map[string]*Group] // nil when no group hedges
	sched  Scheduler
}

// Init prepares h: env reaches the endpoints, txns are the read-only transactions seen
// beginning (a query naming one by ID may be hedged), clk is the Scheduler's clock.
func (h *Hedger) Init(env Env, txns *spannerreq.ReadOnlyTxns, clk clock.Clock) {
	h.env, h.txns, h.sched.clock = env, txns, clk
}

// Set makes settings (by group name; nil or empty: no group hedges) the hedging in force,
// from the next stream on. A group that hedged before keeps its counters, budget and
// measurements.
func (h *Hedger) Set(settings map[string]Settings) {
	old := h.groups.Load()
	if len(settings) == 0 {
		h.groups.Store(nil)
		return
	}
	next := make(map[string]*Group, len(settings))
	for name, s := range settings {
		st := (*state)(nil)
		if old != nil && (*old)[name] != nil {
			st = (*old)[name].state
		} else {
			st = &state{}
			st.tokens.Store(math.Float64bits(Bucket))
		}
		next[name] = &Group{settings: s, state: st}
	}
	h.groups.Store(&next)
}

// Group returns the hedging of group, nil when it does not hedge. It allocates nothing.
func (h *Hedger) Group(group string) *Group {
	g := h.groups.Load()
	if g == nil {
		return nil
	}
	return (*g)[group]
}

// Groups returns the hedging groups by name (not to be modified); nil when none hedges.
func (h *Hedger) Groups() map[string]*Group {
	if g := h.groups.Load(); g != nil {
		return *g
	}
	return nil
}

// Counts returns the counts of every hedging group, by name; nil when none hedges.
func (h *Hedger) Counts() map[string]Counts {
	groups := h.Groups()
	if groups == nil {
		return nil
	}
	out := make(map[string]Counts, len(groups))
	for name, g := range groups {
		out[name] = g.Counts()
	}
	return out
}

// For returns the hedging of group for a stream of method with desc; nil when the group
// does not hedge or the method is not hedged. It allocates nothing.
func (h *Hedger) For(group, method string, desc *grpc.StreamDesc) *Group {
	if h.groups.Load() == nil || !StreamMethod(method, desc) {
		return nil
	}
	return h.Group(group)
}

// NewStream starts the primary stream of a hedging group g (For) on the acquired pool p of
// group me, on a context of its own that a winning hedge cancels, and returns it wrapped in
// a Stream; id is the Spanner client's request ID, for pool.CallInfo.Tag. Errors: those of
// pool.Pool.NewStream.
func (h *Hedger) NewStream(ctx context.Context, g *Group, p *pool.Pool, me *multiendpoint.MultiEndpoint,
	desc *grpc.StreamDesc, method, id string, opts []grpc.CallOption) (grpc.ClientStream, error) {
	pctx, cancel := context.WithCancel(ctx)
	start := h.env.Begin(pctx, p, me.Name())
	cs, err := p.NewStream(pctx, desc, method, opts, pool.CallInfo{Group: me.Name(), Tag: id, Start: start, Class: spannerreq.Class(method, nil),
		Rec: callinfo.HandleFrom(ctx)})
	if err != nil {
		cancel()
		return nil, err
	}
	return &Stream{primary: cs, cancelPrimary: cancel, h: h, group: g, me: me, endpoint: p.Endpoint(), ctx: ctx, desc: desc,
		method: method, methodIndex: methodIndex(method), id: id, opts: opts}, nil
}

// Close stops the Scheduler: no hedge is sent from then on.
func (h *Hedger) Close() { h.sched.close() }

// QueuedDue returns the fire times (Unix nanoseconds of the clock) of the streams queued in
// the Scheduler, in heap order: what tests of the budget's asks wait on.
func (h *Hedger) QueuedDue() []int64 {
	h.sched.mu.Lock()
	defer h.sched.mu.Unlock()
	due := make([]int64, len(h.sched.queue))
	for i, s := range h.sched.queue {
		due[i] = s.schedDue
	}
	return due
}
