package callinfo

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// Without a record nothing is recorded and nothing allocated, whatever the call path does.
func TestNoRecordCostsNothing(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		r := From(ctx)
		h := r.Begin("g", "m", "e1", "e2")
		c := Attach(ctx, h)
		HandleFrom(c).Hedge("e2").End(nil)
		h.Resent("e3").End(errors.ErrUnsupported)
		h.HedgeWon()
		h.End(nil)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations without a record, want 0", allocs)
	}
	if With(ctx, nil) != ctx || Attach(ctx, nil) != ctx {
		t.Fatal("a nil record or handle changed the context")
	}
}

// Why an attempt was steered: a retry elsewhere after the record's last attempt failed on the
// endpoint picked, else an overload cooldown; an attempt sent where picked is not steered.
func TestBeginSteered(t *testing.T) {
	fail := errors.New("unavailable")
	for _, tc := range []struct {
		name     string
		prev     []Attempt // attempts before, with their outcome
		from, to string
		want     string
	}{
		{"sent where picked", nil, "e1", "e1", ""},
		{"not looked at", nil, "", "e2", ""},
		{"retry after a failure there", []Attempt{{Endpoint: "e1", Err: fail}}, "e1", "e2", SteeredRetry},
		{"after a success there: the cooldown", []Attempt{{Endpoint: "e1"}}, "e1", "e2", SteeredOverload},
		{"after a failure elsewhere: the cooldown", []Attempt{{Endpoint: "e3", Err: fail}}, "e1", "e2", SteeredOverload},
		{"first attempt: the cooldown", nil, "e1", "e2", SteeredOverload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Record
			for _, p := range tc.prev {
				r.Begin("g", "m", "", p.Endpoint).End(p.Err)
			}
			r.Begin("g", "m", tc.from, tc.to)
			as := r.Attempts()
			a := as[len(as)-1]
			wantFrom := ""
			if tc.want != "" {
				wantFrom = tc.from
			}
			if a.Steered != tc.want || a.SteeredFrom != wantFrom || a.Endpoint != tc.to {
				t.Fatalf("attempt %+v, want steered %q from %q", a, tc.want, tc.from)
			}
		})
	}
}

// A hedge that wins is Won, its stream not; a hedge that does not is lost to its stream; a
// resend replaces its attempt; only the first End counts.
func TestHedgeResendAndEnd(t *testing.T) {
	var r Record
	p := r.Begin("g", "read", "e1", "e1")
	p.Hedge("e2").End(nil)
	p.HedgeWon()
	p.End(errors.New("canceled"))
	q := r.Begin("g", "read", "e1", "e1")
	q.Hedge("e2").End(errors.New("canceled"))
	q.End(nil)
	q.End(errors.New("late")) // ignored
	s := r.Begin("g", "read", "e1", "e1")
	s.End(errors.New("unavailable"))
	s.Resent("e2").End(nil)
	as := r.Attempts()
	if len(as) != 6 {
		t.Fatalf("%d attempts, want 6: %+v", len(as), as)
	}
	want := []struct {
		endpoint          string
		hedge, hedged, ok bool
		won               bool
		resentFrom        string
	}{
		{"e1", false, true, false, false, ""}, // lost to its hedge
		{"e2", true, false, true, true, ""},   // the hedge that won
		{"e1", false, true, true, true, ""},   // won: its hedge lost
		{"e2", true, false, false, false, ""}, // the hedge that lost
		{"e1", false, false, false, false, ""},
		{"e2", false, false, true, false, "e1"},
	}
	for i, w := range want {
		a := as[i]
		if a.Endpoint != w.endpoint || a.Hedge != w.hedge || a.Hedged != w.hedged || (a.Err == nil) != w.ok || a.Won != w.won || a.ResentFrom != w.resentFrom || a.End.IsZero() {
			t.Errorf("attempt %d: %+v, want %+v", i, a, w)
		}
	}
}

// Attempts may be recorded from several goroutines (a hedge ends on its own).
func TestConcurrentAttempts(t *testing.T) {
	var r Record
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				h := r.Begin("g", "m", "e1", "e1")
				h.Hedge("e2").End(nil)
				h.End(nil)
				_ = r.Attempts()
			}
		})
	}
	wg.Wait()
	if n := len(r.Attempts()); n != 8*100*2 {
		t.Fatalf("%d attempts, want %d", n, 8*100*2)
	}
}
