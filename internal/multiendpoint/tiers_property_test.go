package multiendpoint

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/spannerme/spanner-multiendpoint/internal/clock"
)

// drawTiers draws 1 to 5 endpoints of propUniverse cut into tiers at random.
func drawTiers(t *rapid.T, label string) [][]string {
	list := drawList(t, label)
	var tiers [][]string
	for i, id := range list {
		if i == 0 || rapid.Bool().Draw(t, label+"-cut") {
			tiers = append(tiers, nil)
		}
		tiers[len(tiers)-1] = append(tiers[len(tiers)-1], id)
	}
	return tiers
}

func flatten(tiers [][]string) ([]string, map[string]int) {
	var list []string
	tierOf := map[string]int{}
	for i, t := range tiers {
		for _, id := range t {
			list = append(list, id)
			tierOf[id] = i
		}
	}
	return list, tierOf
}

// view is the Tier the model expects: the current tier's Available members, or Current alone.
func (m *refModel) view() Tier {
	v := Tier{Index: m.tier(m.current)}
	for _, id := range m.order {
		if m.tier(id) == v.Index && m.eps[id].state == Available {
			v.Members = append(v.Members, id)
			v.Joined = append(v.Joined, m.eps[id].joined)
		}
	}
	if v.Members == nil {
		v.Members, v.Joined = []string{m.current}, []time.Time{m.eps[m.current].joined}
	}
	if m.ramp != nil {
		v.RampStart = m.ramp.start
		for _, id := range m.order {
			if m.tier(id) == m.ramp.from && m.eps[id].state == Available {
				v.Previous = append(v.Previous, id)
			}
		}
	}
	return v
}

// TestProperty_TiersMatchReferenceModel drives random member events, clock steps,
// reconfigurations by tiers and duration changes against the reference model of
// property_test.go with tiers. After every step: Current, Status (tiers, states, pending
// switch), the events and the Tier view match the model; and, independently of the model,
// the current tier is the highest tier with an Available member unless a rule holds it back
// (a switch waiting SwitchingDelay to that tier, or a current tier still Recovering), and the
// view's members are exactly its Available members.
func TestProperty_TiersMatchReferenceModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clk := clock.NewFake(time.Time{})
		stamp := func(at time.Time) string { return at.Format("15:04:05.000000000") }

		tiers := drawTiers(t, "tiers")
		list, tierOf := flatten(tiers)
		rt, sd := propDuration(t, "recovery"), propDuration(t, "switching")
		grace := propDuration(t, "grace")
		jitter := rapid.SampledFrom([]float64{0, 0, 0.25, 1}).Draw(t, "jitter")
		seed := rapid.Uint64().Draw(t, "seed")
		implRand, refRand := rand.New(rand.NewPCG(seed, 1)), rand.New(rand.NewPCG(seed, 1))
		readyNow := drawReady(t, "ready")
		slowStart := rapid.SampledFrom([]time.Duration{0, 0, propDuration(t, "slow start")}).Draw(t, "slowStart")

		var got []string
		m, err := New(Options{Name: "p", Tiers: tiers, RecoveryTimeout: rt, SwitchingDelay: sd, ConnectGrace: grace, Clock: clk,
			SlowStart:       slowStart,
			SwitchingJitter: jitter, Rand: implRand.Float64,
			InitialState: func(e string) State { return readyNow[e] },
			OnSwitch: func(ev Event) {
				got = append(got, fmt.Sprintf("%s>%s %s@%s", ev.From, ev.To, ev.Reason, stamp(ev.At)))
			}})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		defer m.Close()
		ref := &refModel{name: "p", now: clk.Now(), rt: rt, sd: sd, grace: grace, jitter: jitter, rnd: refRand.Float64,
			eps: map[string]*refEndpoint{}, current: list[0], tierOf: tierOf, slowStart: slowStart}
		for _, id := range list {
			ref.add(id, readyNow[id])
		}
		ref.order = slices.Clone(list)
		ref.choose(0)

		check := func() {
			t.Helper()
			if gs, ws := fmt.Sprintf("%+v", m.Status()), fmt.Sprintf("%+v", ref.status()); gs != ws {
				t.Fatalf("Status differs\n impl:  %s\n model: %s", gs, ws)
			}
			if strings.Join(got, "; ") != strings.Join(ref.events, "; ") {
				t.Fatalf("events = %q, model %q", got, ref.events)
			}
			v := m.Tier()
			if gv, wv := fmt.Sprintf("%+v", *v), fmt.Sprintf("%+v", ref.view()); gv != wv {
				t.Fatalf("Tier() = %s, model %s", gv, wv)
			}
			// Independently of the model.
			s := m.Status()
			top := -1
			var avail [][]string = make([][]string, len(s.Tiers))
			for _, e := range s.Endpoints {
				if e.State != Available {
					continue
				}
				ti := ref.tier(e.Endpoint)
				avail[ti] = append(avail[ti], e.Endpoint)
				if top < 0 || ti < top {
					top = ti
				}
			}
			if v.Index != s.CurrentTier || !slices.Contains(s.Tiers[v.Index], m.Current()) {
				t.Fatalf("view tier %d, Status tier %d, Current %q in %v", v.Index, s.CurrentTier, m.Current(), s.Tiers)
			}
			if a := avail[v.Index]; a != nil && !slices.Equal(v.Members, a) {
				t.Fatalf("view members %v, the tier's Available members %v", v.Members, a)
			}
			if v.Previous != nil {
				// A ramp: within SlowStart of the switch back, from a lower tier whose
				// Available members the view lists.
				if !clk.Now().Before(v.RampStart.Add(slowStart)) || s.SlowStartFrom <= v.Index || !slices.Equal(v.Previous, avail[s.SlowStartFrom]) {
					t.Fatalf("ramp view %+v at %v, Status %+v", v, clk.Now(), s)
				}
			}
			if top >= 0 && top != v.Index {
				waiting := s.PendingSwitch != "" && ref.tier(s.PendingSwitch) == top && avail[v.Index] != nil
				recovering := avail[v.Index] == nil && top > v.Index && ref.tierState(m.Current()) == Recovering
				if !waiting && !recovering {
					t.Fatalf("current tier %d, highest Available tier %d, but no rule holds the switch: %+v", v.Index, top, s)
				}
			}
			got, ref.events = nil, nil
		}
		check()

		pickEndpoint := func(t *rapid.T) string {
			if rapid.IntRange(0, 9).Draw(t, "unknown") == 0 {
				return rapid.SampledFrom(propUniverse).Draw(t, "any endpoint")
			}
			return rapid.SampledFrom(ref.order).Draw(t, "endpoint")
		}
		moveTo := func(at time.Time) {
			clk.Set(at)
			ref.advanceTo(at)
		}
		t.Repeat(map[string]func(*rapid.T){
			"up": func(t *rapid.T) {
				e := pickEndpoint(t)
				m.SetEndpointAvailability(e, true)
				ref.setAvailability(e, true)
			},
			"down": func(t *rapid.T) {
				e := pickEndpoint(t)
				m.SetEndpointAvailability(e, false)
				ref.setAvailability(e, false)
			},
			"advance": func(t *rapid.T) {
				d := time.Duration(rapid.IntRange(0, 40).Draw(t, "advance")) * 100 * ms
				moveTo(ref.now.Add(d))
			},
			"advance to a deadline": func(t *rapid.T) {
				d, ok := ref.nextDeadline()
				if !ok {
					t.Skip("no deadline")
				}
				moveTo(d.Add(time.Duration(rapid.IntRange(-1, 1).Draw(t, "offset"))))
			},
			"reconfigure tiers": func(t *rapid.T) {
				tiers := drawTiers(t, "new tiers")
				list, tierOf := flatten(tiers)
				readyNow = drawReady(t, "ready")
				rt, sd := propDuration(t, "recovery"), propDuration(t, "switching")
				if err := m.ReconfigureTiers(tiers, rt, sd); err != nil {
					t.Fatalf("ReconfigureTiers(%v, %v, %v): %v", tiers, rt, sd, err)
				}
				ref.rt = rt
				ref.ramp = nil // a reconfiguration ends the ramp
				ref.applyTiers(list, tierOf, readyNow)
				ref.applyTimeouts(rt, sd)
				ref.choose(Reconfiguration)
			},
			"set timeouts": func(t *rapid.T) {
				rt, sd := propDuration(t, "recovery"), propDuration(t, "switching")
				if err := m.SetTimeouts(rt, sd); err != nil {
					t.Fatalf("SetTimeouts(%v, %v): %v", rt, sd, err)
				}
				ref.setTimeouts(rt, sd)
			},
			"": func(*rapid.T) { check() },
		})
		m.Close()
		if n := clk.Pending(); n != 0 {
			t.Fatalf("%d timers pending after Close", n)
		}
	})
}
