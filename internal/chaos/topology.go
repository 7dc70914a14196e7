package chaos

import (
	"errors"
	"fmt"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/spannerme/spanner-multiendpoint/internal/rig"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// endpoint is one fake PSC endpoint: a TCP fake (the PSC address) in front of a gRPC frontend
// in front of the backend, or, without frontends, the TCP fake straight in front of the
// backend.
type endpoint struct {
	tcp *spannermetest.Endpoint
	fe  *spannermetest.Frontend // nil without frontends
	// calls watches the application's calls at the frontend (nil without frontends).
	calls *appCalls
}

// topology is the run's network: ONE backend and NumEndpoints endpoints in front of it.
type topology struct {
	eps [NumEndpoints]endpoint
	// db is the database layer's fault at every frontend (query-overload, db-overload).
	db dbOverload
	// seed is the plan's, for the database layer's draws.
	seed uint64
	// fo measures failovers from the calls the frontends serve.
	fo failoverWatch
}

// startTopology starts the endpoints in front of b, with a gRPC frontend behind each TCP
// fake when p has frontend faults (seeded from p.Seed, the GOAWAY storm p.Storm). Errors: a
// listener cannot start; what started is closed then.
func startTopology(b *rig.Backend, p *Plan) (*topology, error) {
	t := &topology{seed: p.Seed}
	t.fo.topo = t
	for i := range t.eps {
		target := b.Addr
		if p.Frontends {
			t.eps[i].calls = &appCalls{fo: &t.fo, e: i}
			opts := []spannermetest.FrontendOption{spannermetest.WithSeed(int64(p.Seed) + int64(i)),
				spannermetest.WithServerOptions(grpc.ChainStreamInterceptor(t.db.interceptor(i), t.eps[i].calls.intercept))}
			if p.Storm.MaxAge > 0 && p.Storm.Endpoint == i {
				opts = append(opts, spannermetest.WithMaxConnectionAge(p.Storm.MaxAge, p.Storm.Grace))
			}
			fe, err := spannermetest.NewFrontend(b.Addr, opts...)
			if err != nil {
				t.close()
				return nil, fmt.Errorf("chaos: frontend of %s: %w", endpointName(i), err)
			}
			t.eps[i].fe = fe
			target = fe.Addr()
		}
		tcp, err := spannermetest.NewEndpoint(target)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("chaos: endpoint %s: %w", endpointName(i), err)
		}
		t.eps[i].tcp = tcp
	}
	return t, nil
}

// close closes every endpoint and frontend (not the backend) and waits for them.
func (t *topology) close() {
	for _, e := range t.eps {
		if e.tcp != nil {
			_ = e.tcp.Close()
		}
		if e.fe != nil {
			_ = e.fe.Close()
		}
	}
}

// addr returns endpoint i's address: what the client's configuration names.
func (t *topology) addr(i int) string { return t.eps[i].tcp.Addr() }

// index returns the index of the endpoint at addr (0 for e1), or -1.
func (t *topology) index(addr string) int {
	for i := range t.eps {
		if t.addr(i) == addr {
			return i
		}
	}
	return -1
}

// name returns e1, e2, e3 for an endpoint address, or the address itself ("-" for none).
func (t *topology) name(addr string) string {
	if i := t.index(addr); i >= 0 {
		return endpointName(i)
	}
	if addr == "" {
		return "-"
	}
	return addr
}

// options builds the client's configuration for groups.
func (t *topology) options(groups Groups, rt, sd time.Duration) *grpcgcp.GCPMultiEndpointOptions {
	o := &grpcgcp.GCPMultiEndpointOptions{Default: GroupDefault, MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{}}
	for g, name := range groupNames {
		m := &multiendpoint.MultiEndpointOptions{RecoveryTimeout: rt, SwitchingDelay: sd}
		for _, e := range groups[g] {
			m.Endpoints = append(m.Endpoints, t.addr(e))
		}
		o.MultiEndpoints[name] = m
	}
	return o
}

// tiers returns the client's Settings.Tiers: each group of groupTiers with its tiers'
// addresses and tierSlowStart.
func (t *topology) tiers() map[string]spannerme.TierSettings {
	out := map[string]spannerme.TierSettings{}
	for g, tiers := range groupTiers {
		if tiers == nil {
			continue
		}
		ts := spannerme.TierSettings{SlowStart: tierSlowStart}
		for _, tier := range tiers {
			var addrs []string
			for _, e := range tier {
				addrs = append(addrs, t.addr(e))
			}
			ts.Tiers = append(ts.Tiers, addrs)
		}
		out[groupNames[g]] = ts
	}
	return out
}

// errNoFrontend is returned for a frontend step on a topology without frontends.
var errNoFrontend = errors.New("chaos: frontend fault without frontends")

// apply performs a fault or heal step on its endpoint (not reconfigure).
func (t *topology) apply(s Step) error {
	if kinds[s.Kind].layer == layerDatabase {
		if t.eps[0].fe == nil {
			return errNoFrontend
		}
		k := s.Kind
		if k == KindOverloadPass {
			k = KindNone
		}
		t.db.set(k, t.seed^uint64(s.At))
		return nil
	}
	e := t.eps[s.Endpoint]
	if kinds[s.Kind].layer == layerFrontend && e.fe == nil {
		return errNoFrontend
	}
	switch s.Kind {
	case KindDown, KindFlapDown:
		e.tcp.Down()
	case KindUp, KindFlapUp:
		return e.tcp.Up()
	case KindReset:
		e.tcp.Drop()
	case KindBlackhole:
		e.tcp.Blackhole()
		e.tcp.Drop()
	case KindSilentBlackhole:
		e.tcp.Blackhole()
	case KindDieYoung:
		// DieYoung answers new connections with SETTINGS, GOAWAY and a close, and leaves live
		// ones forwarding: Drop sends the client into it.
		e.tcp.DieYoung()
		e.tcp.Drop()
	case KindSlow:
		e.tcp.Slow(s.Fault.Latency, s.Fault.Bandwidth)
	case KindPass:
		e.tcp.Pass()
	case KindFrontendHang:
		e.fe.Hang()
	case KindFrontendPartial:
		return e.fe.FailFraction(s.Fault.Fraction, codes.Unavailable)
	case KindFrontendLatency, KindFrontendBrownout:
		e.fe.SetLatency(s.Fault.Latency)
	case KindFrontendRestart:
		e.fe.DropConnections()
	case KindFrontendUnavailable, KindDatabaseUnavailable:
		return e.fe.FailAll(codes.Unavailable)
	case KindFrontendCommitFail, KindFrontendCommitFailLong:
		return e.fe.FailMethods(codes.Unavailable, "/google.spanner.v1.Spanner/Commit")
	case KindFrontendPartialReset:
		e.fe.DropSomeConnections(max(1, int(e.fe.Stats().Active/2)))
	case KindFrontendPass:
		e.fe.Pass()
		e.fe.SetLatency(0)
	default:
		return fmt.Errorf("chaos: step %v is not an endpoint step", s)
	}
	return nil
}
