package verdict

import (
	"sync"
	"testing"
)

// A Store keeps each group's last verdicts, keeps the previous ones when an evaluation
// returns nil, runs one evaluation of a group at a time, and forgets groups on Retain.
func TestStoreKeepsTheLastEvaluation(t *testing.T) {
	var s Store
	if _, ok := s.Reason("g", "a"); ok {
		t.Fatal("a verdict before any evaluation")
	}
	s.Evaluate("g", func(map[string]Reason) map[string]Reason { return map[string]Reason{"a": Usable, "b": Ejected} })
	s.Evaluate("g", func(prev map[string]Reason) map[string]Reason {
		if prev["b"] != Ejected {
			t.Errorf("previous verdicts %v, want b ejected", prev)
		}
		return nil // replaced meanwhile: keep
	})
	if r, ok := s.Reason("g", "b"); !ok || r != Ejected {
		t.Errorf("Reason(g, b) = %v, %v; want ejected", r, ok)
	}
	if _, ok := s.Reason("h", "a"); ok {
		t.Error("group h has a verdict it was never given")
	}

	var wg sync.WaitGroup
	inside := 0
	for range 8 {
		wg.Go(func() {
			s.Evaluate("g", func(map[string]Reason) map[string]Reason {
				inside++ // the race detector fails this if two evaluations of g overlap
				defer func() { inside-- }()
				if inside != 1 {
					t.Errorf("%d evaluations of g at once", inside)
				}
				return map[string]Reason{"a": NotConnected}
			})
		})
	}
	wg.Wait()
	if r, _ := s.Reason("g", "a"); r != NotConnected {
		t.Errorf("Reason(g, a) = %v after the concurrent evaluations", r)
	}
	s.Retain(func(group string) bool { return group != "g" })
	if _, ok := s.Reason("g", "a"); ok {
		t.Error("a forgotten group keeps its verdicts")
	}
}
