package judge

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/route"
	"github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client's protos, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// closedEnv is the Env of a closed connection: no table. It records whatever it is told.
type closedEnv struct{ told []string }

func (e *closedEnv) Table() *route.Table               { return nil }
func (e *closedEnv) Cooling(string) bool               { return false }
func (e *closedEnv) ConfirmedBy(string, []string) bool { return false }
func (e *closedEnv) VerdictChanged(_ *route.Table, g, ep string, _, _ verdict.Reason) {
	e.told = append(e.told, "verdict "+g+" "+ep)
}
func (e *closedEnv) Brownout(c brownout.Change) { e.told = append(e.told, "brownout "+c.Endpoint) }
func (e *closedEnv) Changed()                   { e.told = append(e.told, "changed") }

// After Close (no routing table) a pool's news concern nobody: nothing is evaluated, probed
// or told, and nothing panics. The latency source is the pool's own unless Init was given
// another.
func TestJudgeAfterClose(t *testing.T) {
	var env closedEnv
	var j Judge
	j.Init(&env, brownout.NewGroups(true, brownout.Rule{}), clock.Real, nil)
	p := new(pool.Pool)
	j.EvaluateAll()
	j.Publish(p)
	j.SampleBrownouts(p)
	j.ConfirmFallbacks(p, 0)
	j.RecheckEjected(p)
	if len(env.told) != 0 {
		t.Fatalf("a closed connection was told %v", env.told)
	}
	if j.Latency() == nil {
		t.Fatal("no latency source")
	}
	fixed := func(*pool.Pool) (time.Duration, bool) { return 7 * time.Millisecond, true }
	j.Init(&env, brownout.NewGroups(true, brownout.Rule{}), clock.Real, fixed)
	if d, ok := j.Latency()(p); !ok || d != 7*time.Millisecond {
		t.Fatalf("the injected latency source gave %v, %v; want 7ms", d, ok)
	}
}

// confirmCooling asks each cooling endpoint's cooldown about the endpoint the group would move
// to (the first usable one that does not cool) and keeps the cooldown only when it answered;
// with no such endpoint it keeps every cooldown (a last resort) and asks nothing.
func TestConfirmCoolingAsksAboutTheEndpointTheGroupWouldMoveTo(t *testing.T) {
	usable := verdict.Input{Connected: true}
	cooling := verdict.Input{Connected: true, Cooling: true}
	eps := []multiendpoint.EndpointStatus{{Endpoint: "e1"}, {Endpoint: "e2"}, {Endpoint: "e3"}}
	for _, tc := range []struct {
		name     string
		in       []verdict.Input
		answered map[string]string // cooling endpoint -> the endpoint that answered during its cooldown
		asked    string            // the endpoint asked about ("" none)
		want     []bool            // Cooling after
	}{
		{"the next endpoint answered", []verdict.Input{cooling, usable, usable}, map[string]string{"e1": "e2"}, "e2", []bool{true, false, false}},
		{"only a later one answered", []verdict.Input{cooling, usable, usable}, map[string]string{"e1": "e3"}, "e2", []bool{false, false, false}},
		{"a degraded one is passed over", []verdict.Input{cooling, {Connected: true, Degraded: true}, usable}, map[string]string{"e1": "e3"}, "e3", []bool{true, false, false}},
		{"an ejected one is passed over", []verdict.Input{cooling, {Connected: true, Ejected: true}, usable}, map[string]string{"e1": "e3"}, "e3", []bool{true, false, false}},
		{"a cooling one is passed over", []verdict.Input{cooling, cooling, usable}, map[string]string{"e1": "e3", "e2": "e3"}, "e3", []bool{true, true, false}},
		{"no endpoint to move to: a last resort", []verdict.Input{cooling, {Connected: true, Ejected: true}, {}}, nil, "", []bool{true, false, false}},
		{"nothing cools", []verdict.Input{usable, usable, usable}, nil, "", []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]verdict.Input(nil), tc.in...)
			asked := ""
			confirmCooling(eps, in, func(e string, by []string) bool {
				if len(by) != 1 || (asked != "" && asked != by[0]) {
					t.Fatalf("asked about %v", by)
				}
				asked = by[0]
				return tc.answered[e] == by[0]
			})
			if asked != tc.asked {
				t.Errorf("asked about %q, want %q", asked, tc.asked)
			}
			for i, x := range in {
				if x.Cooling != tc.want[i] {
					t.Errorf("%s: Cooling %v, want %v", eps[i].Endpoint, x.Cooling, tc.want[i])
				}
			}
		})
	}
}
