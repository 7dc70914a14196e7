package spannerme

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/callinfo"
	"github.com/spannerme/spanner-multiendpoint/internal/health"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// Invoke performs a unary call on the current endpoint of the call's group. While that
// endpoint's pool is connecting, the call waits (until it connects, fails, or the group
// switches) instead of queuing in gRPC; so does a call that waits for ready
// (grpc.WaitForReady(true), per call or as a default call option) while the pool has
// failed. Errors: the call's own; CANCELED after Close (and on a zero-value
// GCPMultiEndpoint); UNAVAILABLE when reconfigurations kept retiring the picked pool (rare;
// retryable); the context's error, as a gRPC status, if it ends while the call waits. A call
// sent to an endpoint is measured (metrics) and, when ctx carries a recording span, the span
// gets the group and the endpoint as attributes. A call that fails while its endpoint's pool
// is not connected names the endpoint and its connection error (docs/failure-semantics.md,
// "Errors that name their cause"), with the code unchanged: FAILED_PRECONDITION at
// once when no endpoint of the group can connect and retrying will not fix it (TLS), else
// UNAVAILABLE (retryable) or the context's code.
// A read-only query or read routed through a group with a policy (Settings.DirectedReads) is
// sent with the group's DirectedReadOptions when it has none of its own; args itself is never
// modified. A call whose pick is an endpoint cooling down after RESOURCE_EXHAUSTED goes to the
// group's next available endpoint, and a Spanner client's retry of an attempt that failed on
// the picked endpoint goes to another one (docs/health.md, "Overload cooldown" and "Retry
// elsewhere"; internal/steer).
func (gme *GCPMultiEndpoint) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return gme.invoke(ctx, method, args, reply, "", opts)
}

// invoke is Invoke for a call that carries the Spanner client's request ID id ("" for
// none; the header is already in ctx): an attempt after the first of a request whose
// previous attempt failed on the picked endpoint goes to another one (internal/steer).
func (gme *GCPMultiEndpoint) invoke(ctx context.Context, method string, args, reply any, id string, opts []grpc.CallOption) error {
	class := gme.callClass(method, args)
	p, me, err := gme.pickConnected(ctx, class, method, opts)
	if err != nil {
		return err
	}
	rec, picked := callinfo.From(ctx), p
	p = gme.steering.Steer(p, me, id)
	h := rec.Begin(me.Name(), method, picked.Endpoint(), p.Endpoint())
	defer p.Release()
	dr := gme.snap.Load().DirectedReads()
	if dro := dr[me.Name()]; dro != nil {
		args = gme.roTxns.WithDirectedReads(args, dro)
	}
	start := gme.obs.CallBegin(ctx, p.Endpoint(), poolName(p), me.Name())
	tc := gme.tiers.Begin(me, p, method)
	err = p.Conn().Invoke(ctx, method, args, reply, opts...)
	h.End(err)
	tc.Done(err)
	if err == nil {
		gme.roTxns.NoteBegin(method, args, reply)
	}
	if err != nil || spannerreq.SuccessCounts(method, args) {
		p.Observe(class, method, err, false)
	}
	p.EndCall(ctx, me.Name(), start, err)
	gme.steering.CallEnded(p, id, class, method, err)
	if err != nil {
		return route.NotConnected(err, me, p)
	}
	return nil
}

// callClass is the health class of a unary call (spannerreq.Class), where a query that names
// by ID a read-only transaction this GCPMultiEndpoint saw begin (roTxns) is a read, not a
// write: the Spanner client's queries in a multi-use read-only transaction.
func (gme *GCPMultiEndpoint) callClass(method string, args any) health.Class {
	c := spannerreq.Class(method, args)
	if c == health.Writes && method == spannerreq.MethodExecuteSQL && gme.roTxns.NamesReadOnly(args) {
		return health.Reads
	}
	return c
}

// pickConnected returns the acquired pool of the current endpoint of ctx's group, once that
// pool is not connecting. A pool that is connecting (CONNECTING or IDLE) does not take the
// call: gRPC would hold it until the connection attempt ends, up to MinConnectTimeout, even
// after the group has failed over (an endpoint that accepts TCP and never answers, F3). The
// call waits here instead, holding nothing, until a pool's state or a group's current
// endpoint changes, and picks again. READY pools take it at once; so do pools in
// TRANSIENT_FAILURE, where gRPC fails it fast with UNAVAILABLE for the Spanner client to
// retry; unless the call waits for ready (grpc.WaitForReady(true), given by the call or as a
// default call option of the dial options), which gRPC would hold in that pool. A call that
// does not wait for ready fails at once when its group cannot connect for a reason that
// retrying does not fix (route.CannotConnect). It also returns the group that picked the pool.
// Errors: those of pick and route.CannotConnect, and, when ctx ends while the call waits, the
// context's code with the endpoint and its last connection error (route.WaitEnded).
func (gme *GCPMultiEndpoint) pickConnected(ctx context.Context, class health.Class, method string, opts []grpc.CallOption) (*pool.Pool, *multiendpoint.MultiEndpoint, error) {
	if gme.zero() {
		return nil, nil, errClosedCall
	}
	count := true
	for {
		changed := gme.changed.Wait() // before the pick: no news between them is lost
		p, me, err := gme.pick(ctx, class, method, count)
		if err != nil {
			return nil, nil, err
		}
		state := p.State()
		if state == connectivity.Ready {
			return p, me, nil
		}
		waitForReady := pool.WaitForReady(gme.waitForReadyDefault, opts)
		if !waitForReady {
			if err := route.CannotConnect(&gme.snap, me, p); err != nil {
				p.Release()
				return nil, nil, err
			}
		}
		switch state {
		case connectivity.Connecting, connectivity.Idle:
		case connectivity.TransientFailure:
			if !waitForReady {
				return p, me, nil // gRPC fails it fast, for the Spanner client to retry
			}
			// gRPC would hold it in this pool even after the group fails over.
		default:
			return p, me, nil
		}
		p.Release()
		count = false
		gme.waiting.Add(1)
		select {
		case <-changed:
			gme.waiting.Add(-1)
		case <-ctx.Done():
			gme.waiting.Add(-1)
			return nil, nil, route.WaitEnded(ctx, me, p)
		}
	}
}

// pick returns the acquired pool of the current endpoint of ctx's group (for a group with
// tiers, the member picked for a call to method: route.Route.Pool), and the group. A
// pool retired between the snapshot load and the acquire makes it retry on the newer
// snapshot. count says whether a call naming an unknown group is counted. The name "" is
// the default group's, as no name is. A session call (class health.Sessions) that names no
// group follows availability (route.Table.SessionGroup).
func (gme *GCPMultiEndpoint) pick(ctx context.Context, class health.Class, method string, count bool) (*pool.Pool, *multiendpoint.MultiEndpoint, error) {
	name, named := FromMEContext(ctx)
	named = named && name != ""
	for range 4 {
		s := gme.snap.Load()
		if s == nil {
			return nil, nil, errClosedCall
		}
		r := s.Default
		switch {
		case named && name != s.DefaultName:
			if g, ok := s.Groups[name]; ok {
				r = g
			} else {
				if count {
					gme.noteUnknown(name)
					count = false
				}
				if gme.settings.RejectUnknownGroups {
					return nil, nil, route.UnknownGroup(name, s)
				}
			}
		case !named && class == health.Sessions:
			r = s.SessionGroup()
		}
		if p := r.Pool(s, method); p != nil && p.Acquire() {
			return p, r.ME, nil
		}
	}
	// Only a reconfiguration racing this call on every attempt gets here.
	return nil, nil, status.Error(codes.Unavailable, "spannerme: endpoint reconfigured during the call; retry")
}

// noteUnknown counts a call that named a group that is not configured, logging the name once
// (route.UnknownNames keeps the first route.MaxUnknownNames names).
func (gme *GCPMultiEndpoint) noteUnknown(name string) {
	if !gme.unknown.Note(name) {
		return
	}
	if gme.settings.RejectUnknownGroups {
		gme.log.Warn("spannerme: call names an unknown MultiEndpoint; it fails (Settings.RejectUnknownGroups; logged once per name)", "multiendpoint", name)
	} else {
		gme.log.Warn("spannerme: call names an unknown MultiEndpoint; it uses the default one (logged once per name)",
			"multiendpoint", name, "default", gme.snap.Load().DefaultNameOrEmpty())
	}
}

// NewStream starts a streaming call on the current endpoint of the call's group, picked as
// for Invoke, with the same errors (an error that gRPC gives only at the stream's first
// SendMsg or RecvMsg, where grpcgcp creates the stream there, is gRPC's own). The call
// counts as in flight on that endpoint until the stream ends (RecvMsg returns an error or io.EOF, SendMsg returns an error other than io.EOF,
// a call without server streaming has its response, or ctx is done), so removing the
// endpoint does not cut it. As with any gRPC stream, a caller that stops reading early must
// cancel ctx. gRPC reports that cancellation through a grpc.OnFinish call option: a stream
// interceptor among the caller's dial options that does not pass the call options on to gRPC
// hides it, and a stream abandoned that way then counts as in flight until its endpoint's
// pool is closed (Settings.DrainTimeout after the endpoint is removed). The request of a
// read-only streaming query or read routed through a group with a policy
// (Settings.DirectedReads) is sent with the group's DirectedReadOptions when it has none of
// its own, as for Invoke. A streaming read that fails with a code the Spanner client retries
// before any response message is sent again at once to another available endpoint of its
// group (docs/health.md, "Retry elsewhere"; internal/steer).
func (gme *GCPMultiEndpoint) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return gme.newStream(ctx, desc, method, "", opts)
}

// newStream is NewStream for a call that carries the Spanner client's request ID id ("" for
// none; the header is already in ctx), which is added to the stream's errors.
func (gme *GCPMultiEndpoint) newStream(ctx context.Context, desc *grpc.StreamDesc, method, id string, opts []grpc.CallOption) (grpc.ClientStream, error) {
	class := spannerreq.Class(method, nil)
	p, me, err := gme.pickConnected(ctx, class, method, opts)
	if err != nil {
		return nil, spannerreq.WithError(err, id)
	}
	rec, picked := callinfo.From(ctx), p
	p = gme.steering.Steer(p, me, id)
	h := rec.Begin(me.Name(), method, picked.Endpoint(), p.Endpoint())
	var cs grpc.ClientStream
	if hg := gme.hedger.For(me.Name(), method, desc); hg != nil {
		cs, err = gme.hedger.NewStream(callinfo.Attach(ctx, h), hg, p, me, desc, method, id, opts)
	} else {
		start := gme.obs.CallBegin(ctx, p.Endpoint(), poolName(p), me.Name())
		tc := gme.tiers.Begin(me, p, method)
		cs, err = p.NewStream(ctx, desc, method, opts, pool.CallInfo{Group: me.Name(), Tag: id, Start: start, Class: class, First: tc.First(), Resend: gme.steering.Resend, Rec: h})
	}
	if err != nil {
		return nil, spannerreq.WithError(route.NotConnected(err, me, p), id)
	}
	return gme.roTxns.WithDirectedStream(cs, method, gme.snap.Load().DirectedReads()[me.Name()]), nil
}
