package spannerme

import (
	"sort"
	"strings"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// Per-group directed reads (Settings.DirectedReads). Routing picks the network path (a
// group's PSC endpoint); which replica serves a read-only request is Spanner's choice unless
// the request carries DirectedReadOptions (https://cloud.google.com/spanner/docs/directed-reads).
// A group's policy is added to the read-only requests routed through the group that carry
// none of their own; Spanner refuses directed reads in read-write transactions and
// partitioned DML (same page), so those never get it.

// MaxReplicaSelections is the most replica selections one DirectedReadOptions may list
// (includeReplicas or excludeReplicas): 10, Spanner's limit
// (https://cloud.google.com/spanner/docs/directed-reads, Limitations).
const MaxReplicaSelections = spannerreq.MaxReplicaSelections

// directedReads is the validated Settings.DirectedReads: a deep copy, by group name, shared
// read-only by every request it is added to. Nil means no group has a policy.
type directedReads map[string]*spannerpb.DirectedReadOptions

// parseDirectedReads validates dr and returns a deep copy of it (nil when dr is empty).
// Entries of groups not configured (yet) are allowed. Errors: a *ConfigError naming the
// group, for the first invalid entry by group name.
func parseDirectedReads(dr map[string]*spannerpb.DirectedReadOptions) (directedReads, error) {
	if len(dr) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(dr))
	for name := range dr {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(directedReads, len(dr))
	for _, name := range names {
		if problem := spannerreq.CheckDirectedReadOptions(dr[name]); problem != "" {
			return nil, configErr(name, "", -1, "Settings.DirectedReads: %s", problem)
		}
		out[name] = proto.Clone(dr[name]).(*spannerpb.DirectedReadOptions)
	}
	return out, nil
}

// DirectedReadsStatus is a group's directed read policy (Settings.DirectedReads) as the
// configuration file writes it: IncludeReplicas (with AutoFailoverDisabled) or
// ExcludeReplicas.
type DirectedReadsStatus struct {
	// IncludeReplicas are the replicas that serve the group's read-only requests, in order of
	// preference; nil when the policy excludes replicas.
	IncludeReplicas []ReplicaSelection `json:"includeReplicas,omitempty"`
	// ExcludeReplicas are the replicas that never serve them; nil when the policy includes
	// replicas.
	ExcludeReplicas []ReplicaSelection `json:"excludeReplicas,omitempty"`
	// AutoFailoverDisabled: with IncludeReplicas, Spanner waits for a listed replica rather
	// than serving from another one when none of them is healthy.
	AutoFailoverDisabled bool `json:"autoFailoverDisabled,omitempty"`
}

// ReplicaSelection is one replica selection of a directed read policy.
type ReplicaSelection struct {
	// Location is the region, e.g. "us-west2"; "" for any.
	Location string `json:"location,omitempty"`
	// Type is "READ_ONLY" or "READ_WRITE"; "" for any type.
	Type string `json:"type,omitempty"`
}

// String returns the policy on one line, e.g. "include us-west2/READ_ONLY, us-east4
// (auto failover disabled)" or "exclude us-east1"; "" for nil.
func (d *DirectedReadsStatus) String() string {
	if d == nil {
		return ""
	}
	word, sels := "include ", d.IncludeReplicas
	if d.IncludeReplicas == nil {
		word, sels = "exclude ", d.ExcludeReplicas
	}
	var b strings.Builder
	b.WriteString(word)
	for i, s := range sels {
		if i > 0 {
			b.WriteString(", ")
		}
		switch {
		case s.Location != "" && s.Type != "":
			b.WriteString(s.Location + "/" + s.Type)
		case s.Location != "":
			b.WriteString(s.Location)
		default:
			b.WriteString(s.Type)
		}
	}
	if d.AutoFailoverDisabled {
		b.WriteString(" (auto failover disabled)")
	}
	return b.String()
}

// directedReadsStatusOf converts a validated policy; nil for none.
func directedReadsStatusOf(o *spannerpb.DirectedReadOptions) *DirectedReadsStatus {
	if o == nil {
		return nil
	}
	sels := func(in []*spannerpb.DirectedReadOptions_ReplicaSelection) []ReplicaSelection {
		out := make([]ReplicaSelection, len(in))
		for i, s := range in {
			out[i].Location = s.GetLocation()
			if t := s.GetType(); t != spannerpb.DirectedReadOptions_ReplicaSelection_TYPE_UNSPECIFIED {
				out[i].Type = t.String()
			}
		}
		return out
	}
	d := &DirectedReadsStatus{}
	if inc := o.GetIncludeReplicas(); inc != nil {
		d.IncludeReplicas, d.AutoFailoverDisabled = sels(inc.GetReplicaSelections()), inc.GetAutoFailoverDisabled()
	} else {
		d.ExcludeReplicas = sels(o.GetExcludeReplicas().GetReplicaSelections())
	}
	return d
}
