package route

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// MaxUnknownNames bounds how many distinct unknown group names UnknownNames remembers; calls
// naming further ones are counted under OtherUnknownNames.
const (
	MaxUnknownNames   = 64
	OtherUnknownNames = "(other unknown names)"
)

// UnknownNames counts the calls that named a group that is not configured, by name. The
// first MaxUnknownNames distinct names are kept, however many first calls race; only the first
// call of each of them takes a lock. The zero value is empty and ready; safe for concurrent use.
type UnknownNames struct {
	counts sync.Map // group name (string) -> *atomic.Int64
	// mu serializes the first call of each name, so that exactly MaxUnknownNames names are
	// kept; names is written under it, read without it.
	mu    sync.Mutex
	names atomic.Int64 // distinct names in counts, at most MaxUnknownNames
}

// Note counts a call that named name; fresh reports that name was stored by this call (the
// caller logs it, once per name).
func (u *UnknownNames) Note(name string) (fresh bool) {
	if c, ok := u.counts.Load(name); ok {
		c.(*atomic.Int64).Add(1)
		return false
	}
	c, fresh := u.counter(name)
	c.Add(1)
	return fresh
}

// counter returns the counter of a name that is not stored yet: its own, stored now if fewer
// than MaxUnknownNames names are kept (fresh), else the shared one.
func (u *UnknownNames) counter(name string) (c *atomic.Int64, fresh bool) {
	other := func() *atomic.Int64 {
		c, _ := u.counts.LoadOrStore(OtherUnknownNames, new(atomic.Int64))
		return c.(*atomic.Int64)
	}
	if u.names.Load() >= MaxUnknownNames { // full: never again a lock
		// A name is stored before it is counted, so every kept name is visible now, this
		// one included if a racing first call stored it since the caller looked.
		if v, ok := u.counts.Load(name); ok {
			return v.(*atomic.Int64), false
		}
		return other(), false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if v, ok := u.counts.Load(name); ok { // stored by a racing first call
		return v.(*atomic.Int64), false
	}
	if u.names.Load() >= MaxUnknownNames {
		return other(), false
	}
	c = new(atomic.Int64)
	u.counts.Store(name, c)
	u.names.Add(1)
	return c, true
}

// CountsInto sets into[name] to the calls counted per name (OtherUnknownNames for the rest),
// and returns how many names it set.
func (u *UnknownNames) CountsInto(into map[string]int64) int {
	n := 0
	u.counts.Range(func(k, v any) bool {
		into[k.(string)] = v.(*atomic.Int64).Load()
		n++
		return true
	})
	return n
}

// UnknownGroup is the error of a call that named group name, which table s does not configure,
// when such calls are refused (spannerme's Settings.RejectUnknownGroups): InvalidArgument, which
// the Spanner client does not retry, naming the group, the groups there are (sorted) and the
// nearest of them when one is a likely misspelling.
func UnknownGroup(name string, s *Table) error {
	groups := make([]string, 0, len(s.Groups)+1)
	for g := range s.Groups {
		groups = append(groups, g)
	}
	if s.DefaultName != "" && s.Groups[s.DefaultName] == nil {
		groups = append(groups, s.DefaultName)
	}
	return status.Errorf(codes.InvalidArgument,
		"spannerme: the call names MultiEndpoint %q, which is not configured%s; the groups are %s (Settings.RejectUnknownGroups refuses such calls instead of sending them to the default group)",
		name, DidYouMean(name, groups), QuotedList(groups))
}

// DidYouMean returns ` (did you mean "X"?)` for the name X of names nearest to name when it is
// a likely misspelling (Nearest), else "".
func DidYouMean(name string, names []string) string {
	if near := Nearest(name, names); near != "" {
		return fmt.Sprintf(" (did you mean %q?)", near)
	}
	return ""
}

// QuotedList returns names sorted, quoted and comma-separated. names is not modified.
func QuotedList(names []string) string {
	out := make([]string, len(names))
	for i, s := range names {
		out[i] = strconv.Quote(s)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// Nearest returns the element of names fewest edits away from name (configfile.EditDistance),
// if at most 2 edits and at most half of name's length away; "" when none.
func Nearest(name string, names []string) string {
	if len(name) > 64 { // no likely misspelling; and the distance is quadratic
		return ""
	}
	best, bestD := "", 3
	for _, n := range slices.Sorted(slices.Values(names)) { // ties: the first by name
		if d := configfile.EditDistance(name, n); d < bestD && 2*d <= len(name) {
			best, bestD = n, d
		}
	}
	return best
}
