package spannerme

import (
	"fmt"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"go.yaml.in/yaml/v3"

	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
)

// decodeDirectedReads reads group's directedReads section, for Settings.DirectedReads
// (directedreads.go): includeReplicas (with autoFailoverDisabled) or excludeReplicas, each a
// list of {location, type} selections.
func decodeDirectedReads(d *configfile.Decoder, group string, n *configfile.Node, path string) (*spannerpb.DirectedReadOptions, error) {
	var include, exclude []*spannerpb.DirectedReadOptions_ReplicaSelection
	var noFailover bool
	selections := func(dst *[]*spannerpb.DirectedReadOptions_ReplicaSelection) func(*configfile.Node, string) error {
		return func(n *configfile.Node, p string) error {
			n = configfile.Resolve(n)
			if n.Kind != yaml.SequenceNode {
				return d.ErrAt(n, p, "want a list of replica selections ({location: us-west2, type: READ_ONLY}), got %s", configfile.KindName(n))
			}
			*dst = []*spannerpb.DirectedReadOptions_ReplicaSelection{} // present, even if empty
			for i, e := range n.Content {
				sel := &spannerpb.DirectedReadOptions_ReplicaSelection{}
				err := d.Mapping(e, fmt.Sprintf("%s[%d]", p, i), configfile.Fields{
					"location": func(n *configfile.Node, p string) (err error) {
						sel.Location, err = d.Str(n, p)
						return err
					},
					"type": func(n *configfile.Node, p string) error {
						v, err := d.Str(n, p)
						if err != nil {
							return err
						}
						switch v {
						case "READ_ONLY":
							sel.Type = spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY
						case "READ_WRITE":
							sel.Type = spannerpb.DirectedReadOptions_ReplicaSelection_READ_WRITE
						default:
							return d.ErrAt(configfile.Resolve(n), p, "want READ_ONLY or READ_WRITE, got %s", configfile.Q(v))
						}
						return nil
					},
				})
				if err != nil {
					return err
				}
				*dst = append(*dst, sel)
			}
			return nil
		}
	}
	err := d.Mapping(n, path, configfile.Fields{
		"includeReplicas": selections(&include),
		"excludeReplicas": selections(&exclude),
		"autoFailoverDisabled": func(n *configfile.Node, p string) (err error) {
			noFailover, err = d.Bool(n, p)
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	o := &spannerpb.DirectedReadOptions{}
	switch {
	case include != nil && exclude != nil:
		return nil, d.ErrAt(configfile.Resolve(n), path, "give includeReplicas or excludeReplicas, not both")
	case exclude != nil && d.Node(configfile.Join(path, "autoFailoverDisabled")) != nil:
		return nil, d.ErrAt(d.Node(configfile.Join(path, "autoFailoverDisabled")), configfile.Join(path, "autoFailoverDisabled"),
			"applies only to includeReplicas")
	case include != nil:
		o.Replicas = &spannerpb.DirectedReadOptions_IncludeReplicas_{IncludeReplicas: &spannerpb.DirectedReadOptions_IncludeReplicas{
			ReplicaSelections: include, AutoFailoverDisabled: noFailover}}
	case exclude != nil:
		o.Replicas = &spannerpb.DirectedReadOptions_ExcludeReplicas_{ExcludeReplicas: &spannerpb.DirectedReadOptions_ExcludeReplicas{
			ReplicaSelections: exclude}}
	}
	if problem := spannerreq.CheckDirectedReadOptions(o); problem != "" {
		return nil, d.ErrAt(configfile.Resolve(n), path, "group %s: %s", configfile.Q(group), problem)
	}
	return o, nil
}
