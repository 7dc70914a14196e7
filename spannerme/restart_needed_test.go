package spannerme

import (
	"slices"
	"testing"
)

// restartNeeded lists pool settings a file drops as well
// as ones it changes. Absent poolSize or sessionAffinity means the default, and the
// running pools keep what they were created with.
func TestRestartNeeded_ListsDroppedPoolSettings(t *testing.T) {
	const groups = "default: g\nmultiEndpoints: {g: {endpoints: [127.0.0.1:1]}}\n"
	parse := func(t *testing.T, extra string) *FileConfig {
		t.Helper()
		fc, err := ParseConfig([]byte(groups + extra))
		if err != nil {
			t.Fatal(err)
		}
		return fc
	}
	for _, tc := range []struct {
		name, created, edited string
		want                  []string
	}{
		{"affinity dropped", "sessionAffinity: true\n", "", []string{"sessionAffinity"}},
		{"affinity turned off", "sessionAffinity: true\n", "sessionAffinity: false\n", []string{"sessionAffinity"}},
		{"affinity added", "", "sessionAffinity: true\n", []string{"sessionAffinity"}},
		{"pool size dropped", "poolSize: 2\n", "", []string{"poolSize"}},
		{"pool size changed", "poolSize: 2\n", "poolSize: 3\n", []string{"poolSize"}},
		{"both dropped", "poolSize: 2\nsessionAffinity: true\n", "", []string{"poolSize", "sessionAffinity"}},
		{"pool size spelled as the default", "", "poolSize: 4\n", nil},
		{"nothing set, nothing set", "", "", nil},
		{"kept", "poolSize: 2\nsessionAffinity: true\n", "sessionAffinity: true\npoolSize: 2\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			created := parse(t, tc.created)
			gme := newGME(t, created.Options, created.Settings)
			if got := restartNeeded(gme, parse(t, tc.edited)); !slices.Equal(got, tc.want) {
				t.Errorf("restartNeeded = %v, want %v", got, tc.want)
			}
		})
	}
}
