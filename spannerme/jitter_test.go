package spannerme

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/grpc"
)

// Settings.SwitchingJitter outside [0, 1] is a *ConfigError naming the field, and nothing is
// dialed.
func TestSettingsSwitchingJitterValidation(t *testing.T) {
	for _, j := range []float64{-0.5, 1.5, math.NaN()} {
		dials := 0
		o := options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, time.Second, "127.0.0.1:1")})
		o.DialFunc = func(context.Context, string, ...grpc.DialOption) (*grpc.ClientConn, error) {
			dials++
			return nil, errors.New("not dialed in this test")
		}
		s := fastSettings(nil)
		s.SwitchingJitter = j
		gme, err := NewGCPMultiEndpointWithSettings(o, s, insecureDial)
		if err == nil {
			gme.Close()
			t.Errorf("SwitchingJitter %v accepted", j)
			continue
		}
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "Settings.SwitchingJitter") {
			t.Errorf("SwitchingJitter %v: %v; want a *ConfigError naming Settings.SwitchingJitter", j, err)
		}
		if dials != 0 {
			t.Errorf("SwitchingJitter %v: %d dials before the error", j, dials)
		}
	}
}

// Settings.SwitchingJitter reaches every group: a switch-back is due within
// [SwitchingDelay, SwitchingDelay×(1+SwitchingJitter)) after the endpoint's return. (The
// state machine's tests check the spread on a fake clock.)
func TestSettingsSwitchingJitterDelaysSwitchBack(t *testing.T) {
	const sd, jitter = time.Hour, 0.5 // the switch-back itself never happens in the test
	e1, e2 := startEndpoint(t, "E1"), startEndpoint(t, "E2")
	e1.Down()
	s := fastSettings(nil)
	s.SwitchingJitter = jitter
	gme := newGME(t, options("g", map[string]*multiendpoint.MultiEndpointOptions{"g": group(0, sd, e1.Addr(), e2.Addr())}), s)
	waitServedBy(t, context.Background(), gme, "E2", 10*time.Second)
	if err := e1.Up(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a switch back to E1 pending", func() bool { return groupOf(gme, "g").PendingSwitch == e1.Addr() })
	g := groupOf(gme, "g")
	wait := g.PendingSwitchAt.Sub(g.Endpoints[0].Since)
	window := time.Duration(float64(sd) * jitter)
	// wait == sd only if the draw was exactly 0 (probability 2^-53 per draw).
	if wait <= sd || wait >= sd+window {
		t.Errorf("switch-back due %v after E1's return, want within (%v, %v)", wait, sd, sd+window)
	}
	if g.Current != e2.Addr() {
		t.Errorf("Current = %s, want E2 until the switch-back", g.Current)
	}
}
