package route

import "testing"

// Nearest suggests a likely misspelling (a transposition, a letter missing or added), never a
// name far away, and breaks ties by name whatever the order given.
func TestNearest(t *testing.T) {
	groups := []string{"west", "default", "east"}
	for name, want := range map[string]string{
		"wset":      "west",
		"defualt":   "default",
		"deafult":   "default",
		"eas":       "east",
		"analytics": "",
		"w":         "",
		"":          "",
	} {
		if got := Nearest(name, groups); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", name, got, want)
		}
	}
	if a, b := Nearest("ab", []string{"ac", "aa"}), Nearest("ab", []string{"aa", "ac"}); a != "aa" || b != "aa" {
		t.Errorf("a tie gives %q and %q by order, want aa both times", a, b)
	}
	if got := QuotedList([]string{"west", "default"}); got != `"default", "west"` {
		t.Errorf("QuotedList = %s", got)
	}
}
