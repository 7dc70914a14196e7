package chaos

import (
	"context"
	"log/slog"
	"sync"
	"time"

	groupverdict "github.com/spannerme/spanner-multiendpoint/internal/verdict"
)

// lastResort is a time during which a group used an ejected endpoint because every connected
// endpoint of the group was ejected (rule 4 of internal/verdict, verdict EjectedEverywhere),
// as the client itself logged it.
type lastResort struct {
	group    string
	endpoint string    // e1, e2, e3
	from, to time.Time // to: zero while it lasts
}

// covers reports whether l lasted at some time in [from, to].
func (l lastResort) covers(from, to time.Time) bool {
	return !l.from.After(to) && (l.to.IsZero() || !l.to.Before(from))
}

// lastResortLog is a slog.Handler in front of the run's logger that records, from spannerme's
// verdict lines ("endpoint used as a last resort" and "no longer a last resort": one per
// group and change, internal/observe), when a group used an endpoint under rule 4. Rule 4 depends
// on which endpoints are connected, which the plan does not know (a reset or a frontend
// restart leaves an endpoint unconnected for a moment), so the judge of the long commit
// failures takes the client's own account. Every record is passed on to next as it is.
type lastResortLog struct {
	next slog.Handler
	name func(addr string) string
	s    *lastResortStore
}

type lastResortStore struct {
	mu    sync.Mutex // guards spans
	spans []lastResort
}

func newLastResortLog(next slog.Handler, name func(addr string) string) *lastResortLog {
	return &lastResortLog{next: next, name: name, s: &lastResortStore{}}
}

// Enabled lets every verdict line through (INFO and WARN), whatever next wants.
func (h *lastResortLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *lastResortLog) Handle(ctx context.Context, r slog.Record) error {
	var group, addr, now, was string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "multiendpoint":
			group = a.Value.String()
		case "endpoint":
			addr = a.Value.String()
		case "verdict":
			now = a.Value.String()
		case "was":
			was = a.Value.String()
		}
		return true
	})
	if rule4 := groupverdict.EjectedEverywhere.String(); group != "" && addr != "" && (now == rule4 || was == rule4) && now != was {
		h.s.note(group, h.name(addr), now == rule4, r.Time)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *lastResortLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &lastResortLog{next: h.next.WithAttrs(as), name: h.name, s: h.s}
}

func (h *lastResortLog) WithGroup(g string) slog.Handler {
	return &lastResortLog{next: h.next.WithGroup(g), name: h.name, s: h.s}
}

// note opens (begins) or closes group's span of endpoint at t.
func (s *lastResortStore) note(group, endpoint string, begins bool, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.spans) - 1; i >= 0; i-- {
		if sp := &s.spans[i]; sp.group == group && sp.endpoint == endpoint && sp.to.IsZero() {
			if !begins {
				sp.to = t
			}
			return // begins: already open
		}
	}
	if begins {
		s.spans = append(s.spans, lastResort{group: group, endpoint: endpoint, from: t})
	}
}

// spans returns the spans recorded so far.
func (h *lastResortLog) spans() []lastResort {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return append([]lastResort(nil), h.s.spans...)
}
