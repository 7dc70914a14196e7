package spannerme

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/cooldown"
	"github.com/spannerme/spanner-multiendpoint/internal/observe"
	"github.com/spannerme/spanner-multiendpoint/internal/steer"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// twoFrontends starts ONE TestService backend with two fake frontends in front of it, E1
// and E2, recording the calls they receive.
func twoFrontends(t *testing.T) (e1, e2 *spannermetest.Frontend) {
	t.Helper()
	backend := startServer(t, "B")
	e1 = spannermetest.NewFrontendTB(t, backend, spannermetest.WithAttemptRecording(100_000))
	e2 = spannermetest.NewFrontendTB(t, backend, spannermetest.WithAttemptRecording(100_000))
	return e1, e2
}

// threeFrontends starts ONE TestService backend with three fake frontends in front of it.
func threeFrontends(t *testing.T) (e1, e2, e3 *spannermetest.Frontend) {
	t.Helper()
	backend := startServer(t, "B")
	return spannermetest.NewFrontendTB(t, backend), spannermetest.NewFrontendTB(t, backend), spannermetest.NewFrontendTB(t, backend)
}

func received(fe *spannermetest.Frontend) int64 { return fe.Stats().Received }

// unary makes one unary call in group g.
func unary(gme *GCPMultiEndpoint, g string) error {
	ctx, cancel := context.WithTimeout(NewMEContext(context.Background(), g), 5*time.Second)
	defer cancel()
	_, err := testpb.NewTestServiceClient(gme).UnaryCall(ctx, &testpb.SimpleRequest{})
	return err
}

func verdictIn(gme *GCPMultiEndpoint, g, endpoint string) string {
	for _, e := range groupOf(gme, g).Endpoints {
		if e.Endpoint == endpoint {
			return e.Verdict
		}
	}
	return ""
}

// E1 answers RESOURCE_EXHAUSTED with a 3 s RetryInfo: the one call that got it starts the
// cooldown, the next call of the group goes to E2, a group whose only endpoint is E1 keeps
// using it, and 3 s later (fake clock) E1 gets new calls again. A cooldown is no ejection.
func TestOverloadCooldown_RetryInfo(t *testing.T) {
	e1, e2 := twoFrontends(t)
	clk := clock.NewFake(time.Time{})
	var logs syncBuffer
	reader, mp := newMetricReader()
	s := fastSettings(&logs)
	s.MeterProvider = mp
	gme := newGMEWith(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g":    group(10*time.Second, time.Second, e1.Addr(), e2.Addr()),
		"solo": group(10*time.Second, time.Second, e1.Addr()),
	}), s, plumbing{clock: clk})
	waitConnected(t, gme, e1.Addr())
	waitConnected(t, gme, e2.Addr())
	eventually(t, 5*time.Second, "E1 current and usable", func() bool {
		return groupOf(gme, "g").Current == e1.Addr() && verdictIn(gme, "g", e1.Addr()) == "usable"
	})
	if err := unary(gme, "g"); err != nil {
		t.Fatal(err)
	}
	e1.SetRetryDelay(3 * time.Second)
	if err := e1.FailAll(codes.ResourceExhausted); err != nil {
		t.Fatal(err)
	}
	if err := unary(gme, "g"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first call after the overload: %v, want RESOURCE_EXHAUSTED", err)
	}
	p, _ := poolOf(gme, e1.Addr())
	if c := p.Cooldown; c == nil || !c.Cooling || c.Length != 3*time.Second || !c.FromRetryInfo || c.Repeats != 1 || !c.Until.Equal(clk.Now().Add(3*time.Second)) {
		t.Fatalf("E1 cooldown after one RESOURCE_EXHAUSTED: %+v", c)
	}
	// No other endpoint has answered since: g keeps E1 (only new calls go elsewhere); solo,
	// with no endpoint to use instead, has E1 as its last resort at once.
	if len(p.Cooldown.AnsweredBy) != 0 || verdictIn(gme, "g", e1.Addr()) != "usable" ||
		verdictIn(gme, "solo", e1.Addr()) != "cooling down after RESOURCE_EXHAUSTED, but no other endpoint is usable" {
		t.Fatalf("before another endpoint answered: answered by %v, E1 verdict in g %q, in solo %q; want none, usable, a last resort",
			p.Cooldown.AnsweredBy, verdictIn(gme, "g", e1.Addr()), verdictIn(gme, "solo", e1.Addr()))
	}
	if p.Health.Ejected {
		t.Fatalf("a cooldown ejected E1: %+v", p.Health)
	}
	// Within one call: the next calls of g go to E2, whose first answer confirms the cooldown.
	b1, b2 := received(e1), received(e2)
	for range 5 {
		if err := unary(gme, "g"); err != nil {
			t.Fatalf("call while E1 cools: %v", err)
		}
	}
	if d1, d2 := received(e1)-b1, received(e2)-b2; d1 != 0 || d2 != 5 {
		t.Fatalf("while E1 cools: %d calls reached E1, %d E2; want 0, 5", d1, d2)
	}
	if p, _ := poolOf(gme, e1.Addr()); !slices.Equal(p.Cooldown.AnsweredBy, []string{e2.Addr()}) {
		t.Fatalf("E1 cooldown after E2 answered: %+v, want answered by E2", p.Cooldown)
	}
	if v := verdictIn(gme, "g", e1.Addr()); v != "cooling down after RESOURCE_EXHAUSTED" {
		t.Fatalf("E1 verdict in g: %q", v)
	}
	if v := verdictIn(gme, "solo", e1.Addr()); v != "cooling down after RESOURCE_EXHAUSTED, but no other endpoint is usable" {
		t.Fatalf("E1 verdict in solo: %q", v)
	}
	// The group whose only endpoint is E1 keeps serving what it can from it.
	e1.Pass()
	b1 = received(e1)
	if err := unary(gme, "solo"); err != nil || received(e1) != b1+1 {
		t.Fatalf("solo call while E1 cools: %v, %d calls reached E1; want it served by E1", err, received(e1)-b1)
	}
	// 3 s later E1 gets new calls again.
	clk.Advance(3*time.Second - time.Millisecond)
	b1, b2 = received(e1), received(e2)
	if err := unary(gme, "g"); err != nil || received(e2) != b2+1 {
		t.Fatalf("just before 3 s: %v, E2 got %d; want E2", err, received(e2)-b2)
	}
	clk.Advance(time.Millisecond)
	if err := unary(gme, "g"); err != nil || received(e1) != b1+1 {
		t.Fatalf("at 3 s: %v, E1 got %d; want E1", err, received(e1)-b1)
	}
	p, _ = poolOf(gme, e1.Addr())
	if p.Cooldown == nil || p.Cooldown.Cooling || p.Cooldown.Total != 1 {
		t.Fatalf("E1 cooldown after 3 s: %+v", p.Cooldown)
	}
	if v := verdictIn(gme, "g", e1.Addr()); v != "usable" {
		t.Fatalf("E1 verdict after its cooldown: %q", v)
	}
	st := gme.Status()
	if st.Retries.OverloadSkipped < 5 {
		t.Fatalf("Status.Retries %+v: want at least 5 overload skips", st.Retries)
	}
	rm := collect(t, reader)
	if got := sumBy(rm, observe.MetricCooldowns, AttrEndpoint); got[e1.Addr()] != 1 || len(got) != 2 || got[e2.Addr()] != 0 {
		t.Errorf("cooldowns metric by endpoint = %v, want 1 for E1 and 0 for E2 (present from its pool's start)", got)
	}
	if got := sumBy(rm, observe.MetricReroutes, AttrRerouteReason); got[steer.RerouteOverload] != st.Retries.OverloadSkipped {
		t.Errorf("reroutes metric by reason = %v, want %s: %d", got, steer.RerouteOverload, st.Retries.OverloadSkipped)
	}
	gme.Close()
	for _, want := range []string{"endpoint cooling down after RESOURCE_EXHAUSTED", "another endpoint answered during the cooldown", "endpoint cooldown over"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// E1 answers RESOURCE_EXHAUSTED with a 10 s RetryInfo, and the call then sent to E3, g's
// other endpoint, fails there with UNAVAILABLE (as on a frontend that restarts); E2 serves
// group h, which g does not list. E3, the endpoint g would move to, has not answered since
// the cooldown began (E2's answers to h do not count for g), and g stays on E1 past its
// RecoveryTimeout (fake clock), since moving it would serve nothing better. Once E3 answers
// a call, the cooldown is confirmed for g, which switches to E3 after its RecoveryTimeout.
func TestOverloadWhereNoOtherEndpointAnswersKeepsTheGroup(t *testing.T) {
	e1, e2, e3 := threeFrontends(t)
	clk := clock.NewFake(time.Time{})
	gme := newGMEWith(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(time.Second, time.Second, e1.Addr(), e3.Addr()),
		"h": group(time.Second, time.Second, e2.Addr()),
	}), fastSettings(nil), plumbing{clock: clk})
	for _, fe := range []*spannermetest.Frontend{e1, e2, e3} {
		waitConnected(t, gme, fe.Addr())
	}
	eventually(t, 5*time.Second, "E1 current", func() bool { return groupOf(gme, "g").Current == e1.Addr() })
	e1.SetRetryDelay(10 * time.Second)
	if err := e1.FailAll(codes.ResourceExhausted); err != nil {
		t.Fatal(err)
	}
	if err := e3.FailAll(codes.Unavailable); err != nil {
		t.Fatal(err)
	}
	if err := unary(gme, "g"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("first call after the overload: %v, want RESOURCE_EXHAUSTED", err)
	}
	b3 := received(e3)
	if err := unary(gme, "g"); status.Code(err) != codes.Unavailable || received(e3) != b3+1 {
		t.Fatalf("call while E1 cools: %v, %d reached E3; want UNAVAILABLE from E3", err, received(e3)-b3)
	}
	if err := unary(gme, "h"); err != nil {
		t.Fatalf("h's call on E2: %v", err)
	}
	e3.Pass()
	clk.Advance(2 * time.Second) // past RecoveryTimeout, within the cooldown
	if g, v := groupOf(gme, "g"), verdictIn(gme, "g", e1.Addr()); g.Current != e1.Addr() || g.PendingSwitch != "" || v != "usable" {
		t.Fatalf("with no answer from E3: current %s, pending %q, E1 verdict %q; want E1, none, usable", g.Current, g.PendingSwitch, v)
	}
	if p, _ := poolOf(gme, e1.Addr()); p.Cooldown == nil || !p.Cooldown.Cooling || !slices.Equal(p.Cooldown.AnsweredBy, []string{e2.Addr()}) {
		t.Fatalf("E1 cooldown %+v, want cooling, answered by E2 only", p.Cooldown)
	}
	if err := unary(gme, "g"); err != nil {
		t.Fatalf("call once E3 answers: %v; E3 verdict %q; E1 cooldown %+v", err, verdictIn(gme, "g", e3.Addr()), gme.cooldownStatus(e1.Addr()))
	}
	if v := verdictIn(gme, "g", e1.Addr()); v != "cooling down after RESOURCE_EXHAUSTED" {
		t.Fatalf("E1 verdict after E3 answered: %q", v)
	}
	clk.Advance(time.Second)
	eventually(t, 5*time.Second, "g switched to E3", func() bool { return groupOf(gme, "g").Current == e3.Addr() })
}

// A call sent elsewhere (a retry, a hedge, a resend: Steerer.Other) from E1 goes to E3, not
// to E2, which cools with no answer yet from the endpoint g would move to and so stays
// available to g; with E3 gone too, to E2 rather than nowhere.
func TestCallSentElsewhereAvoidsACoolingEndpoint(t *testing.T) {
	e1, e2, e3 := threeFrontends(t)
	clk := clock.NewFake(time.Time{})
	gme := newGMEWith(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(time.Second, time.Second, e1.Addr(), e2.Addr(), e3.Addr()),
	}), fastSettings(nil), plumbing{clock: clk})
	for _, fe := range []*spannermetest.Frontend{e1, e2, e3} {
		waitConnected(t, gme, fe.Addr())
	}
	eventually(t, 5*time.Second, "E1 current", func() bool { return groupOf(gme, "g").Current == e1.Addr() })
	gme.steering.NoteOverload(e2.Addr(), overloadErr(t, 10*time.Second))
	if v := verdictIn(gme, "g", e2.Addr()); v != "usable" {
		t.Fatalf("E2 verdict %q, want usable (its cooldown unconfirmed)", v)
	}
	me := gme.snap.Load().Group("g")
	other := func() string {
		p, ok := gme.steering.Other(me, e1.Addr())
		if !ok {
			return "none"
		}
		p.Release()
		return p.Endpoint()
	}
	if got := other(); got != e3.Addr() {
		t.Fatalf("sent elsewhere from E1 to %s, want E3 %s", got, e3.Addr())
	}
	if err := e3.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "E3 unavailable", func() bool { return verdictIn(gme, "g", e3.Addr()) == "not connected" })
	if got := other(); got != e2.Addr() {
		t.Fatalf("with E3 gone, sent elsewhere to %s, want E2 %s", got, e2.Addr())
	}
}

// overloadErr is a RESOURCE_EXHAUSTED status, with a RetryInfo of d when d > 0.
func overloadErr(t *testing.T, d time.Duration) error {
	st := status.New(codes.ResourceExhausted, "overloaded")
	if d > 0 {
		var err error
		if st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err != nil {
			t.Fatal(err)
		}
	}
	return st.Err()
}

// A RESOURCE_EXHAUSTED without RetryInfo is the query's: it starts no cooldown. The length
// is the RetryInfo's: a longer one during a cooldown extends it (the superseded timer does
// nothing), one beyond the cap is capped, and nothing cools after Close.
func TestOverloadCooldown_Lengths(t *testing.T) {
	e1, e2 := twoFrontends(t)
	clk := clock.NewFake(time.Time{})
	gme := newGMEWith(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{
		"g": group(time.Hour, time.Second, e1.Addr(), e2.Addr()),
	}), fastSettings(nil), plumbing{clock: clk})
	ep := e1.Addr()
	current := func() *CooldownStatus { return gme.cooldownStatus(ep) }
	if gme.steering.NoteOverload(ep, overloadErr(t, 0)) || current() != nil {
		t.Fatalf("a RESOURCE_EXHAUSTED without RetryInfo started a cooldown: %+v", current())
	}

	// A longer RetryInfo during a cooldown extends it; the first timer is stale.
	gme.steering.NoteOverload(ep, overloadErr(t, 3*time.Second))
	clk.Advance(time.Second)
	gme.steering.NoteOverload(ep, overloadErr(t, 5*time.Second))
	clk.Advance(2 * time.Second) // the first cooldown's end
	if !current().Cooling {
		t.Fatalf("the superseded timer ended the extended cooldown: %+v", current())
	}
	clk.Advance(3 * time.Second)
	if c := current(); c.Cooling || c.Length != 5*time.Second {
		t.Fatalf("after the extended cooldown: %+v", c)
	}
	// A RetryInfo beyond the cap is capped.
	gme.steering.NoteOverload(ep, overloadErr(t, time.Hour))
	if c := current(); c.Length != cooldown.Cap {
		t.Fatalf("an hour's RetryInfo: %+v, want %v", c, cooldown.Cap)
	}
	gme.Close()
	clk.Advance(time.Minute) // the stopped timer does nothing
	if !gme.steering.Cooldowns().Cooling(ep) {
		t.Fatal("the cooldown ended after Close: its timer was not stopped")
	}
	gme.steering.NoteOverload(e2.Addr(), overloadErr(t, 3*time.Second))
	if gme.cooldownStatus(e2.Addr()) != nil {
		t.Fatal("an overload after Close started a cooldown")
	}
}

// CooldownStatus reads back what it writes, with its length as a duration string.
func TestCooldownStatusJSON(t *testing.T) {
	in := CooldownStatus{Cooling: true, AnsweredBy: []string{"127.0.0.1:2"}, Until: time.Date(2026, 12, 1, 0, 0, 3, 0, time.UTC), Length: 3 * time.Second,
		FromRetryInfo: true, Repeats: 2, Total: 5, LastOverload: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"length":"3s"`) {
		t.Fatalf("JSON %s lacks the length as a string", b)
	}
	var out CooldownStatus
	if err := json.Unmarshal(b, &out); err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("read back %+v (%v), want %+v", out, err, in)
	}
	if err := json.Unmarshal([]byte(`{"length":"soon"}`), &out); err == nil {
		t.Fatal("a bad length was accepted")
	}
}
