package verdict

import (
	"slices"
	"testing"

	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func evaluate(in []Input) []Reason {
	out := make([]Reason, len(in))
	Evaluate(in, out)
	return out
}

func TestEvaluate(t *testing.T) {
	up := Input{Connected: true}
	down := Input{}
	ejected := Input{Connected: true, Ejected: true}
	slow := Input{Connected: true, Degraded: true}
	slowEjected := Input{Connected: true, Ejected: true, Degraded: true}
	cooling := Input{Connected: true, Cooling: true}
	coolingSlow := Input{Connected: true, Cooling: true, Degraded: true}
	coolingEjected := Input{Connected: true, Cooling: true, Ejected: true}
	for _, tc := range []struct {
		name string
		in   []Input
		want []Reason
	}{
		{"all usable", []Input{up, up}, []Reason{Usable, Usable}},
		{"a slow endpoint beside a usable one", []Input{up, slow, slow}, []Reason{Usable, Degraded, Degraded}},
		{"the fast endpoint goes down: the slow ones are the last resort", []Input{down, slow, slow}, []Reason{NotConnected, DegradedLastResort, DegradedLastResort}},
		{"the fast endpoint is ejected: the same", []Input{ejected, slow}, []Reason{Ejected, DegradedLastResort}},
		{"ejection wins over degradation", []Input{slowEjected, slow}, []Reason{Ejected, DegradedLastResort}},
		{"nothing connected", []Input{down, down}, []Reason{NotConnected, NotConnected}},
		{"every connected endpoint ejected: all of them available", []Input{ejected, down, slowEjected}, []Reason{EjectedEverywhere, NotConnected, EjectedEverywhere}},
		{"one ejected beside a usable one", []Input{ejected, up}, []Reason{Ejected, Usable}},
		{"no endpoint", nil, []Reason{}},
		{"a cooling endpoint beside a usable one", []Input{cooling, up}, []Reason{Cooling, Usable}},
		{"the only endpoint cools: it keeps serving", []Input{cooling}, []Reason{CoolingLastResort}},
		{"cooling beside down: the last resort", []Input{cooling, down}, []Reason{CoolingLastResort, NotConnected}},
		{"cooling wins over degradation", []Input{coolingSlow, up}, []Reason{Cooling, Usable}},
		{"cooling and slow, no usable: both last resorts", []Input{cooling, slow}, []Reason{CoolingLastResort, DegradedLastResort}},
		{"ejection wins over cooling", []Input{coolingEjected, up}, []Reason{Ejected, Usable}},
		{"ejected beside a cooling one: the cooling one serves", []Input{ejected, cooling}, []Reason{Ejected, CoolingLastResort}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := evaluate(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("Evaluate(%+v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{Usable: "usable", NotConnected: "not connected", Ejected: "ejected",
		Degraded: "degraded", DegradedLastResort: "degraded, but no other endpoint is usable",
		EjectedEverywhere: "ejected, as every connected endpoint of the group is",
		Cooling:           "cooling down after RESOURCE_EXHAUSTED", CoolingLastResort: "cooling down after RESOURCE_EXHAUSTED, but no other endpoint is usable",
		Reason(99): "Reason(99)"} {
		if got := r.String(); got != want {
			t.Errorf("Reason(%d).String() = %q, want %q", r, got, want)
		}
	}
}

func genInputs(t *rapid.T) []Input {
	return rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Input {
		return Input{Connected: rapid.Bool().Draw(t, "connected"), Ejected: rapid.Bool().Draw(t, "ejected"),
			Degraded: rapid.Bool().Draw(t, "degraded"), Cooling: rapid.Bool().Draw(t, "cooling")}
	}), 0, 6).Draw(t, "endpoints")
}

// The invariants of the package doc, over random groups.
func TestEvaluateInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInputs(t)
		got := evaluate(in)
		candidate, available := false, false
		for i, e := range in {
			r := got[i]
			candidate = candidate || (e.Connected && !e.Ejected)
			available = available || r.Available()
			// An endpoint that is not connected is never available, nor an ejected one
			// while the group has a connected endpoint that is not ejected; one that is
			// connected, not ejected and not degraded always is.
			if !e.Connected && r.Available() {
				t.Fatalf("endpoint %d %+v is available (%v)", i, e, r)
			}
			if e.Ejected && r.Available() && slices.ContainsFunc(in, func(o Input) bool { return o.Connected && !o.Ejected }) {
				t.Fatalf("endpoint %d %+v is available (%v) beside a connected, non-ejected one", i, e, r)
			}
			if e.Connected && !e.Ejected && !e.Degraded && !e.Cooling && r != Usable {
				t.Fatalf("endpoint %d %+v is %v, want usable", i, e, r)
			}
			// Brownout and cooldown take an endpoint away only for a usable one.
			if (r == Degraded || r == Cooling) && !slices.Contains(got, Usable) {
				t.Fatalf("endpoint %d is %v with no usable endpoint in the group: %v", i, r, got)
			}
			// A cooling endpoint is never usable, and says so whatever else holds.
			if e.Connected && !e.Ejected && e.Cooling && r != Cooling && r != CoolingLastResort {
				t.Fatalf("endpoint %d %+v is %v, want a cooling reason", i, e, r)
			}
		}
		if candidate && !available {
			t.Fatalf("a connected, non-ejected endpoint but none available: %+v -> %v", in, got)
		}
		if slices.ContainsFunc(in, func(e Input) bool { return e.Connected }) && !available {
			t.Fatalf("a connected endpoint but none available: %+v -> %v", in, got)
		}
	})
}

// The verdict depends on the inputs only: applying a random sequence of input changes in any
// order ends in the same verdict as evaluating the final inputs.
func TestEvaluateDependsOnInputsOnly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		final := genInputs(t)
		start := make([]Input, len(final))
		for i := range start {
			start[i] = Input{Connected: rapid.Bool().Draw(t, "c0"), Ejected: rapid.Bool().Draw(t, "e0"),
				Degraded: rapid.Bool().Draw(t, "d0"), Cooling: rapid.Bool().Draw(t, "k0")}
		}
		// The changes that lead from start to final, one field at a time, in a random order.
		type change struct{ i, field int }
		var changes []change
		for i := range final {
			for f := range 4 {
				changes = append(changes, change{i, f})
			}
		}
		order := rapid.Permutation(changes).Draw(t, "order")
		cur := slices.Clone(start)
		out := make([]Reason, len(cur))
		for _, c := range order {
			switch c.field {
			case 0:
				cur[c.i].Connected = final[c.i].Connected
			case 1:
				cur[c.i].Ejected = final[c.i].Ejected
			case 2:
				cur[c.i].Degraded = final[c.i].Degraded
			case 3:
				cur[c.i].Cooling = final[c.i].Cooling
			}
			Evaluate(cur, out) // an evaluation at every change, as the caller makes
		}
		if want := evaluate(final); !slices.Equal(out, want) {
			t.Fatalf("after the changes: %v, evaluating the final inputs: %v", out, want)
		}
	})
}
