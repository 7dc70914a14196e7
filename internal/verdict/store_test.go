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
	s.Evaluate("g", func(map[string]Reason) (map[string]Reason, []string) {
		return map[string]Reason{"a": Usable, "b": Ejected}, []string{"a"}
	})
	s.Evaluate("g", func(prev map[string]Reason) (map[string]Reason, []string) {
		if prev["b"] != Ejected {
			t.Errorf("previous verdicts %v, want b ejected", prev)
		}
		return nil, nil // replaced meanwhile: keep
	})
	if r, ok := s.Reason("g", "b"); !ok || r != Ejected {
		t.Errorf("Reason(g, b) = %v, %v; want ejected", r, ok)
	}
	if got := s.Available("g"); len(got) != 1 || got[0] != "a" {
		t.Errorf("Available(g) = %v, want [a]", got)
	}
	if _, ok := s.Reason("h", "a"); ok {
		t.Error("group h has a verdict it was never given")
	}

	var wg sync.WaitGroup
	inside := 0
	for range 8 {
		wg.Go(func() {
			s.Evaluate("g", func(map[string]Reason) (map[string]Reason, []string) {
				inside++ // the race detector fails this if two evaluations of g overlap
				defer func() { inside-- }()
				if inside != 1 {
					t.Errorf("%d evaluations of g at once", inside)
				}
				return map[string]Reason{"a": NotConnected}, nil
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

// Every reason has a word for people and a key for metrics, and no two share a key.
func TestEveryReasonIsNamed(t *testing.T) {
	keys := map[string]bool{}
	for _, r := range Reasons() {
		if s := r.String(); s == "" || s[0] == 'R' {
			t.Errorf("reason %d has no name: %q", r, s)
		}
		k := r.Key()
		if k == "" || keys[k] || k[:min(7, len(k))] == "reason_" {
			t.Errorf("reason %v: key %q missing or repeated", r, k)
		}
		keys[k] = true
	}
}
