package spannerme

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NoEndpointError is a call's error together with what explains it: the groups that had no
// available endpoint when the error was examined, each endpoint of them and why it was not
// available. Explain returns it. It wraps the call's error, so errors.Is, errors.As,
// status.Code and spanner.ErrCode see that error through it.
type NoEndpointError struct {
	// Err is the call's error, unchanged.
	Err error
	// Groups are the groups whose current endpoint was not Available, the default group
	// first, then by name. Never empty.
	Groups []GroupDown
	// At is the Status's At: when the causes were read.
	At time.Time
}

// GroupDown is one group in a NoEndpointError.
type GroupDown struct {
	// Group is the group's name; Default reports whether it is the default group (the one
	// that the Spanner client's session calls use first).
	Group   string
	Default bool
	// Current is the group's current endpoint.
	Current string
	// Endpoints are the group's endpoints in priority order (Priority 0 first).
	Endpoints []EndpointDown
}

// EndpointDown is one endpoint of a GroupDown: its availability in the group and its pool's
// connectivity, last connection error and health.
type EndpointDown struct {
	// Endpoint, Name and Priority are as in EndpointStatus.
	Endpoint string
	Name     string
	Priority int
	// State is the endpoint's state in the group.
	State EndpointState
	// Connectivity is its pool's connectivity state, as in PoolStatus ("" if the Status has
	// no pool for it).
	Connectivity string
	// LastError is its pool's most recent connection error, nil when it has had none: it
	// may be history when Connectivity is "READY" (then the endpoint is not Available
	// because of its health).
	LastError *ConnError
	// Ejected is the ejection's reason and detail when health from call outcomes has
	// ejected the endpoint ("" when it is not ejected).
	Ejected string
}

// Explain returns what made a call's error err likely: the groups of st that have no
// available current endpoint, with each of their endpoints, its state, its pool's
// connectivity and its last connection error (for example "refused: ... connection
// refused"). Call it with a failed call's error and the client's Status taken at once:
//
//	if err != nil {
//		if why := spannerme.Explain(err, gme.Status()); why != nil {
//			err = why // err's text, then each group, endpoint and connection error
//		}
//	}
//
// It is how an application gets the cause of the Spanner client's own session wait, whose
// error ("timeout / context canceled during getting session.") has none: the client waits
// for its multiplexed session without any call of the application's reaching spannerme
// (docs/production.md, "Troubleshooting").
//
// It returns nil when err is nil, when err's gRPC code (spanner.ErrCode) is not one that
// endpoints that cannot be reached explain (DEADLINE_EXCEEDED, UNAVAILABLE, CANCELED,
// FAILED_PRECONDITION), when st is Closed, and when every group's current endpoint is
// Available. The causes are those of st, not of the moment err was made, so take st as soon
// as the call fails. It reads only its arguments and is safe for concurrent use.
func Explain(err error, st Status) *NoEndpointError {
	if err == nil || st.Closed {
		return nil
	}
	code := spanner.ErrCode(err)
	if code == codes.Unknown {
		if errors.Is(err, context.DeadlineExceeded) {
			code = codes.DeadlineExceeded
		} else if errors.Is(err, context.Canceled) {
			code = codes.Canceled
		} else {
			code = status.Code(err)
		}
	}
	switch code {
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.FailedPrecondition:
	default:
		return nil
	}
	pools := make(map[string]PoolStatus, len(st.Pools))
	for _, p := range st.Pools {
		if !p.Retired {
			pools[p.Endpoint] = p
		}
	}
	e := &NoEndpointError{Err: err, At: st.At}
	for _, g := range st.Groups {
		if g.Closed || currentAvailable(g) {
			continue
		}
		gd := GroupDown{Group: g.Name, Default: g.Name == st.Default, Current: g.Current}
		for _, ep := range g.Endpoints {
			p := pools[ep.Endpoint]
			d := EndpointDown{Endpoint: ep.Endpoint, Name: ep.Name, Priority: ep.Priority, State: ep.State,
				Connectivity: p.Connectivity, LastError: p.LastError}
			if p.Health.Ejected {
				d.Ejected = p.Health.Reason.String()
				if p.Health.Detail != "" {
					d.Ejected += ": " + p.Health.Detail
				}
			}
			gd.Endpoints = append(gd.Endpoints, d)
		}
		if gd.Default {
			e.Groups = append([]GroupDown{gd}, e.Groups...)
		} else {
			e.Groups = append(e.Groups, gd)
		}
	}
	if len(e.Groups) == 0 {
		return nil
	}
	return e
}

// currentAvailable reports whether g's current endpoint is Available.
func currentAvailable(g GroupStatus) bool {
	for _, ep := range g.Endpoints {
		if ep.Endpoint == g.Current {
			return ep.State == Available
		}
	}
	return false
}

// Error returns the call's error, then, for each group, its endpoints and their causes:
//
//	<call's error>; spannerme: group "g" has no available endpoint: endpoint 127.0.0.1:9
//	(priority 0): Unavailable, pool TRANSIENT_FAILURE, last connection error 1.2s ago:
//	refused: ... connection refused
func (e *NoEndpointError) Error() string {
	var b strings.Builder
	if e.Err != nil {
		b.WriteString(e.Err.Error())
		b.WriteString("; ")
	}
	b.WriteString("spannerme: ")
	for i, g := range e.Groups {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "group %q has no available endpoint: ", g.Group)
		for j, d := range g.Endpoints {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(d.text(e.At))
		}
	}
	return b.String()
}

// text is one endpoint of Error: "endpoint A (name, priority 0): State, pool STATE, cause".
func (d EndpointDown) text(at time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "endpoint %s (", d.Endpoint)
	if d.Name != "" {
		b.WriteString(d.Name + ", ")
	}
	fmt.Fprintf(&b, "priority %d): %s", d.Priority, d.State)
	if d.Connectivity != "" {
		b.WriteString(", pool " + d.Connectivity)
	}
	switch {
	case d.Ejected != "":
		b.WriteString(", ejected (" + d.Ejected + ")")
	case d.LastError != nil:
		ago := "at an unknown time"
		if !d.LastError.At.IsZero() && !at.IsZero() {
			ago = at.Sub(d.LastError.At).Round(time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(&b, ", last connection error %s: %s: %s", ago, d.LastError.Kind, d.LastError.Message)
	default:
		b.WriteString(", no connection attempt has failed yet")
	}
	return b.String()
}

// Unwrap returns the call's error.
func (e *NoEndpointError) Unwrap() error { return e.Err }
