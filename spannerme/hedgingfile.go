package spannerme

import (
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// hedging reads a group's hedging section into Settings.Hedging (hedging.go): delay,
// minDelay and budget, each optional; an empty section ({}) hedges with the defaults.
func (d *fileDecoder) hedging(group string, n *yaml.Node, path string) error {
	var h HedgingSettings
	dur := func(dst *time.Duration) func(*yaml.Node, string) error {
		return func(n *yaml.Node, p string) (err error) {
			*dst, err = d.duration(n, p, "")
			return err
		}
	}
	err := d.mapping(n, path, fieldDecoders{
		"delay":    dur(&h.Delay),
		"minDelay": dur(&h.MinDelay),
		"budget": func(n *yaml.Node, p string) error {
			sc, err := d.scalar(n, p, "a number from 0 to 1")
			if err != nil {
				return err
			}
			v, err := strconv.ParseFloat(sc.Value, 64)
			if err != nil || !(v > 0 && v <= 1) || (sc.Tag != "!!float" && sc.Tag != "!!int") {
				return d.errAt(sc, p, "want a number above 0, at most 1 (a fraction of the hedgeable calls), got %s%s", q(sc.Value), quotedNumber(sc))
			}
			h.Budget = v
			return nil
		},
	})
	if err != nil {
		return err
	}
	if d.settings.Hedging == nil {
		d.settings.Hedging = map[string]HedgingSettings{}
	}
	d.settings.Hedging[group] = h
	return nil
}
