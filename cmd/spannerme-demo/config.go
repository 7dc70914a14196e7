package main

import (
	_ "embed"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"sigs.k8s.io/yaml"
)

// fileConfig is the YAML form of grpcgcp.GCPMultiEndpointOptions.
type fileConfig struct {
	Default        string               `json:"default"`
	MultiEndpoints map[string]fileGroup `json:"multiEndpoints"`
}

type fileGroup struct {
	Endpoints       []string `json:"endpoints"`
	RecoveryTimeout duration `json:"recoveryTimeout"`
	SwitchingDelay  duration `json:"switchingDelay"`
}

// duration reads Go duration strings ("1s", "300ms").
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// defaultConfig is the demo's own configuration (demo-config.yaml), built into the binary so
// that it runs from any directory.
//
//go:embed demo-config.yaml
var defaultConfig []byte

// embeddedName is how errors name defaultConfig.
const embeddedName = "the embedded demo-config.yaml"

// loadConfig reads the configuration file at path; "" means the embedded default.
func loadConfig(path string) (*fileConfig, error) {
	b := defaultConfig
	if path == "" {
		path = embeddedName
	} else {
		var err error
		if b, err = os.ReadFile(path); err != nil {
			return nil, err
		}
	}
	var c fileConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// endpointNames lists every endpoint named in the configuration: the default group's in
// priority order, then the other groups' (by group name) not listed yet.
func (c *fileConfig) endpointNames() []string {
	groups := make([]string, 0, len(c.MultiEndpoints))
	for g := range c.MultiEndpoints {
		if g != c.Default {
			groups = append(groups, g)
		}
	}
	sort.Strings(groups)
	seen := map[string]bool{}
	var out []string
	for _, g := range append([]string{c.Default}, groups...) {
		for _, e := range c.MultiEndpoints[g].Endpoints {
			if !seen[e] {
				seen[e] = true
				out = append(out, e)
			}
		}
	}
	return out
}

// options builds the upstream options type, mapping endpoint names to the addresses that
// serve them; rt and sd, when positive, override every group's durations.
func (c *fileConfig) options(addr map[string]string, rt, sd time.Duration) *grpcgcp.GCPMultiEndpointOptions {
	o := &grpcgcp.GCPMultiEndpointOptions{Default: c.Default, MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{}}
	for name, g := range c.MultiEndpoints {
		m := &multiendpoint.MultiEndpointOptions{RecoveryTimeout: time.Duration(g.RecoveryTimeout), SwitchingDelay: time.Duration(g.SwitchingDelay)}
		if rt > 0 {
			m.RecoveryTimeout = rt
		}
		if sd > 0 {
			m.SwitchingDelay = sd
		}
		for _, e := range g.Endpoints {
			m.Endpoints = append(m.Endpoints, addr[e])
		}
		o.MultiEndpoints[name] = m
	}
	return o
}
