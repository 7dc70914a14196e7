package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The supported Spanner client range that the README names runs from the Makefile's
// SPANNER_OLDEST (what make compat tests) to the version go.mod requires.
func TestSupportedSpannerRangeAgrees(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	find := func(name, text, re string) string {
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s: no match for %s", name, re)
		}
		return m[1]
	}
	oldest := find("Makefile", read("Makefile"), `(?m)^SPANNER_OLDEST \?= (v\S+)$`)
	newest := find("go.mod", read("go.mod"), `(?m)^\s+cloud\.google\.com/go/spanner (v\S+)$`)
	readme := read("README.md")
	want := `**` + oldest + ` to ` + newest + `**`
	if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(readme) {
		t.Errorf("README.md does not name the range %s (SPANNER_OLDEST to go.mod's version)", want)
	}
	if !regexp.MustCompile(regexp.QuoteMeta("`cloud.google.com/go/spanner` " + oldest + " to " + newest)).MatchString(readme) {
		t.Errorf("README.md's install section does not name %s to %s", oldest, newest)
	}
}
