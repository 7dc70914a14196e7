package judge

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/brownout"
	"github.com/spannerme/spanner-multiendpoint/internal/clock"
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
