package spannerme

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"testing"
	"time"
)

// The JSON form of a Status is one style throughout: camelCase keys and durations as Go
// duration strings, the health of each pool and the configuration file's status included,
// and it decodes back into an equal Status, a configuration file's last error included.
func TestStatusJSON_OneStyleAndRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 1, 2, 3, 0, time.UTC)
	st := Status{
		At: at, Default: "g", UnknownGroups: map[string]int64{},
		Groups: []GroupStatus{{Name: "g", Current: "e1:443", Tiers: &TiersStatus{Tiers: [][]string{{"e1:443"}}, SlowStartFrom: -1,
			Members: []TierMemberStatus{{Endpoint: "e1:443", Latency: 2 * time.Millisecond, InFlight: 3, Waiting: 1500 * time.Millisecond}}}}},
		Pools: []PoolStatus{{Endpoint: "e1:443", Connectivity: "READY", Since: at,
			Health: PoolHealth{Ejected: true, EjectedAt: at, EjectedUntil: at.Add(30 * time.Second), Reason: ReasonConsecutiveFailures,
				Detail: "10 calls failed in a row", Ejections: 1, Suspect: true,
				LastProbe:     ProbeStatus{At: at, Latency: 3 * time.Millisecond, Error: "rpc error: code = Unavailable"},
				IntervalStart: at, Calls: 12, Failures: 10, Timeouts: 1, ConsecutiveFailures: 10}}},
		Config: &ConfigStatus{Path: "/etc/spannerme.yaml", Hash: "abc", AppliedAt: at, Applied: 2,
			LastError: errors.New("line 3: bad"), LastErrorAt: at, RestartNeeded: []string{"poolSize"}},
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if keys := regexp.MustCompile(`"([A-Z][A-Za-z]*)":`).FindAllString(string(b), -1); len(keys) != 0 {
		t.Errorf("keys not in camelCase: %v\n%s", keys, b)
	}
	for _, want := range []string{`"latency":"3ms"`, `"latency":"2ms","waiting":"1.5s"`, `"lastError":"line 3: bad"`, `"reason":"consecutive failures"`, `"ejected":true`} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).Match(b) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	var back Status
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("decoding the JSON form: %v\n%s", err, b)
	}
	if back.Config == nil || back.Config.LastError == nil || back.Config.LastError.Error() != "line 3: bad" {
		t.Fatalf("config after the round trip: %+v", back.Config)
	}
	back.Config.LastError = st.Config.LastError
	if !reflect.DeepEqual(back, st) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, st)
	}

	ev := HealthEvent{Endpoint: "e1:443", Kind: EndpointEjected, Reason: ReasonTimeouts, Detail: "d", At: at, Until: at, Ejections: 2}
	b, err = json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if keys := regexp.MustCompile(`"([A-Z][A-Za-z]*)":`).FindAllString(string(b), -1); len(keys) != 0 {
		t.Errorf("HealthEvent keys not in camelCase: %v\n%s", keys, b)
	}
	var evBack HealthEvent
	if err := json.Unmarshal(b, &evBack); err != nil || evBack != ev {
		t.Fatalf("HealthEvent round trip: %+v, %v", evBack, err)
	}
}
