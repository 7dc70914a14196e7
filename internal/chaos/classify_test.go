package chaos

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestClassify(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// The states of a short run: initial groups default=[e1 e2 e3] west=[e3 e1].
	s0 := State{Groups: initialGroups}
	s1 := s0 // 1s: e1 down
	s1.TCP[0] = Fault{Kind: KindDown, Step: 0}
	s2 := s1 // 2s: e3 silently blackholed
	s2.TCP[2] = Fault{Kind: KindSilentBlackhole, Step: 1}
	s3 := s0 // 3s: everything healed
	s4 := s0 // 4s: all down
	for e := range NumEndpoints {
		s4.TCP[e] = Fault{Kind: KindDown, Step: 3}
	}
	s5 := s0 // 5s: healed, then only west reconfigured to [e2]
	s5.Groups = Groups{{0, 1, 2}, {1}}
	s6 := s5 // 6s: e1 silently blackholed, which west does not list but default does
	s6.TCP[0] = Fault{Kind: KindSilentBlackhole, Step: 5}
	s7 := s0 // 7s: default reconfigured to [e2] alone, e2 slowed to 66ms one way
	s7.Groups = Groups{{1}, {2, 0}}
	s7.TCP[1] = Fault{Kind: KindSlow, Latency: 66 * time.Millisecond, Step: 7}
	s8 := s7 // 8s: and held to 187 KiB/s, below what the load's stream queries ask
	s8.TCP[1] = Fault{Kind: KindSlow, Latency: 66 * time.Millisecond, Bandwidth: 187 << 10, Step: 8}
	s9 := s8 // 9s: default reconfigured to [e2 e3]: a path without a limit to fail over to
	s9.Groups = Groups{{1, 2}, {2, 0}}
	tl := &faultTimeline{start: t0, initial: s0, steps: []applied{
		{at(1), Step{After: s1}}, {at(2), Step{After: s2}}, {at(3), Step{After: s3}},
		{at(4), Step{After: s4}}, {at(5), Step{After: s5}}, {at(6), Step{After: s6}},
		{at(7), Step{After: s7}}, {at(8), Step{After: s8}}, {at(9), Step{After: s9}},
	}}
	deadline := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	for _, tc := range []struct {
		name       string
		group      string
		start, end float64
		want       failureClass
		faults     string
		err        error // nil: an error of no gRPC code
	}{
		{"before any fault", GroupDefault, 0.1, 0.5, classUnexplained, "none", nil},
		{"under a loud fault only", GroupDefault, 1.1, 1.9, classUnexplained, "e1:down", nil},
		{"running into a silent fault", GroupDefault, 1.5, 2.5, classSilent, "e1:down e3:silent-blackhole", nil},
		// west = [e3 e1]: both have hard faults from 2s.
		{"a group left without a healthy endpoint", GroupWest, 1.5, 2.5, classNoHealthy, "e1:down e3:silent-blackhole", nil},
		{"spanning an all-down phase", GroupDefault, 3.5, 4.2, classNoHealthy, "e1:down e2:down e3:down", nil},
		{"ending as the all-down phase begins", GroupWest, 3.5, 4.0, classNoHealthy, "e1:down e2:down e3:down", nil},
		{"starting as it ends", GroupWest, 5.0, 5.5, classUnexplained, "none", nil},
		// west does not list e1, but its calls' sessions come from the default group.
		{"silent fault on the default group only", GroupWest, 6.1, 6.5, classSilent, "e1:silent-blackhole", nil},
		// 5-80 ms of latency fails no call: a call that fails there is not excused.
		{"a slow path without a bandwidth limit", GroupDefault, 7.1, 7.9, classUnexplained, "e2:slow(66ms)", deadline},
		// A bandwidth limit on every healthy endpoint of a group holds calls behind the load's
		// bytes on READY connections, where no failover reaches a path that carries them.
		{"a bandwidth limit on the group's only endpoint", GroupDefault, 8.1, 8.9, classSilent, "e2:slow(66ms, 187 KiB/s)", deadline},
		{"a bandwidth limit on the default group's only endpoint", GroupWest, 8.1, 8.9, classSilent, "e2:slow(66ms, 187 KiB/s)", deadline},
		// Waiting is what such a path does: a call that failed otherwise is not excused.
		{"a bandwidth limit, a call failed by its answer", GroupDefault, 8.1, 8.9, classUnexplained, "e2:slow(66ms, 187 KiB/s)", status.Error(codes.Unavailable, "x")},
		// A group that lists a path without a limit can fail over to it.
		{"a bandwidth limit beside a fault-free endpoint", GroupDefault, 9.1, 9.9, classUnexplained, "e2:slow(66ms, 187 KiB/s)", deadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err
			if err == nil {
				err = errors.New("x")
			}
			c := classify(outcome{group: tc.group, start: at(tc.start), end: at(tc.end), err: err}, tl)
			if c.class != tc.want || c.faults != tc.faults {
				t.Errorf("class %v, faults %q; want %v, %q", c.class, c.faults, tc.want, tc.faults)
			}
		})
	}
}

func TestSilentBound(t *testing.T) {
	// silentDetection is 5.5s: the shortest deadline (3s), a probe (2s), RecoveryTimeout.
	for _, tc := range []struct {
		worker string
		want   int
	}{
		{"read/default", 3},  // 3s deadline: the call in flight and two more
		{"sum/default", 3},   // 5s
		{"insert/west", 2},   // 6s
		{"transfer/west", 2}, // 20s
		{"no such worker", 1},
	} {
		if got := silentBound(tc.worker); got != tc.want {
			t.Errorf("silentBound(%s) = %d, want %d", tc.worker, got, tc.want)
		}
	}
}

func TestOverSilentBound(t *testing.T) {
	fail := func(worker string, steps ...int) classified {
		return classified{outcome: outcome{worker: worker}, class: classSilent, silentSteps: steps}
	}
	// transfer/west may lose 2 calls per fault, read/default 3.
	cs := []classified{fail("transfer/west", 4), fail("transfer/west", 4, 9), fail("read/default", 4), fail("read/default", 4),
		fail("read/default", 4), fail("transfer/west", 9)}
	if over := overSilentBound(cs); len(over) != 0 {
		t.Errorf("within the bounds, got %q", over)
	}
	cs = append(cs, fail("transfer/west", 4), fail("transfer/west", 4))
	over := overSilentBound(cs)
	if len(over) != 1 || over[0] != "worker transfer/west failed more than 2 calls under the fault of step 4" {
		t.Errorf("overSilentBound = %q, want one line for transfer/west and step 4", over)
	}
}
