package route

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
	"github.com/spannerme/spanner-multiendpoint/internal/spread"
)

func TestMain(m *testing.M) {
	// go.opencensus.io, a dependency of the Spanner client's protos, starts its worker in init.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// Route.Pool: the pool of the current endpoint for a group without tiers or whose Picker
// is not published; for a group with tiers, the pool of the member its Picker takes, found by
// the Endpoint, or by the address when the table does not pair that Endpoint.
func TestGroupRoute_Pool(t *testing.T) {
	const a1, a2, b = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
	avail := func(string) multiendpoint.State { return multiendpoint.Available }
	flat, err := multiendpoint.New(multiendpoint.Options{Endpoints: []string{a1, a2, b}, InitialState: avail})
	if err != nil {
		t.Fatal(err)
	}
	defer flat.Close()
	tiered, err := multiendpoint.New(multiendpoint.Options{Tiers: [][]string{{a1, a2}, {b}}, InitialState: avail})
	if err != nil {
		t.Fatal(err)
	}
	defer tiered.Close()
	pools := map[string]*pool.Pool{a1: new(pool.Pool), a2: new(pool.Pool), b: new(pool.Pool)}
	reg := spread.NewRegistry(spread.EndpointOptions{})
	// Draws whose top 24 bits are all ones are never uniform, and make the soft comparison
	// take j when costs are equal (u is then almost 1); with the other bits 0, i is the
	// first member and j the second.
	second := func() uint64 { return 0xFFFFFF << 40 }
	picker, err := spread.New(spread.Options{Resolve: reg.Endpoint, Rand: second})
	if err != nil {
		t.Fatal(err)
	}
	paired := []member{{reg.Endpoint(a1), pools[a1]}, {reg.Endpoint(a2), pools[a2]}, {reg.Endpoint(b), pools[b]}}
	stale := new(pool.Pool) // a pool that only the pairing knows: picked by the Endpoint, not the address
	s := &Table{Pools: pools}
	for _, tc := range []struct {
		name string
		r    *Route
		want *pool.Pool
	}{
		{"no tiers: the current endpoint's", &Route{ME: flat}, pools[a1]},
		{"tiers, Picker not published: the current endpoint's", &Route{ME: tiered}, pools[a1]},
		{"tiers: the picked member's", &Route{ME: tiered, picker: picker, members: paired}, pools[a2]},
		{"tiers: the pairing's pool, found by the Endpoint", &Route{ME: tiered, picker: picker,
			members: []member{{reg.Endpoint(a1), pools[a1]}, {reg.Endpoint(a2), stale}}}, stale},
		{"tiers, the picked Endpoint unpaired: by its address", &Route{ME: tiered, picker: picker,
			members: paired[:1]}, pools[a2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.Pool(s, ""); got != tc.want {
				t.Fatalf("pool %p, want %p (pools by address: %v)", got, tc.want, pools)
			}
		})
	}
}
