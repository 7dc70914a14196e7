package spread_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
	"github.com/spannerme/spanner-multiendpoint/internal/spread"
)

// How the call path uses a tiered MultiEndpoint and a Picker: read the view, pick, count the
// call on the endpoint picked.
func Example() {
	m, err := multiendpoint.New(multiendpoint.Options{
		Name:         "default",
		Tiers:        [][]string{{"psc-east4-a:443", "psc-east4-b:443"}, {"psc-west2:443"}},
		InitialState: func(string) multiendpoint.State { return multiendpoint.Available },
	})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	reg := spread.NewRegistry(spread.EndpointOptions{})
	p, err := spread.New(spread.Options{Resolve: reg.Endpoint, Rand: rand.New(rand.NewPCG(1, 1)).Uint64})
	if err != nil {
		panic(err)
	}
	picked := map[string]int{}
	for range 1000 {
		e := p.Pick(m.Tier(), 0)
		e.Begin(0)
		picked[e.Name()]++
		e.Done(0, 0, false) // the call's latency and whether the endpoint failed to answer it
	}
	fmt.Println("tier 0, both members up: east4-a", picked["psc-east4-a:443"] > 300, "east4-b", picked["psc-east4-b:443"] > 300, "west2", picked["psc-west2:443"])

	m.SetEndpointAvailability("psc-east4-a:443", false) // no group switch: its peer takes its calls
	fmt.Println("east4-a down:", p.Pick(m.Tier(), 0).Name(), "current", m.Current())
	// Output:
	// tier 0, both members up: east4-a true east4-b true west2 0
	// east4-a down: psc-east4-b:443 current psc-east4-b:443
}
