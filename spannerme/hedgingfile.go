package spannerme

import (
	"time"

	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// decodeHedging reads a group's hedging section, for Settings.Hedging (hedging.go): delay,
// minDelay and budget, each optional; an empty section ({}) hedges with the defaults.
func decodeHedging(d *configfile.Decoder, n *configfile.Node, path string) (HedgingSettings, error) {
	var h HedgingSettings
	dur := func(dst *time.Duration) func(*configfile.Node, string) error {
		return func(n *configfile.Node, p string) (err error) {
			*dst, err = d.Duration(n, p, "")
			return err
		}
	}
	err := d.Mapping(n, path, configfile.Fields{
		"delay":    dur(&h.Delay),
		"minDelay": dur(&h.MinDelay),
		"budget": func(n *configfile.Node, p string) (err error) {
			h.Budget, err = d.Number(n, p, "a number above 0, at most 1", " (a fraction of the hedgeable calls)",
				func(v float64) bool { return v > 0 && v <= 1 })
			return err
		},
	})
	return h, err
}
