package route

import (
	"sync"
	"sync/atomic"
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

// CountsInto sets into[name] to the calls counted per name (OtherUnknownNames for the rest).
func (u *UnknownNames) CountsInto(into map[string]int64) {
	u.counts.Range(func(k, v any) bool {
		into[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
}
