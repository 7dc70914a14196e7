package spannerme

import (
	"errors"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// ErrInvalidConfig is wrapped by every configuration error returned by NewGCPMultiEndpoint,
// UpdateMultiEndpoints and the client constructors; test for it with errors.Is. The error's
// text names the offending group and endpoint.
var ErrInvalidConfig = multiendpoint.ErrInvalidConfig

// ErrClosed is returned by UpdateMultiEndpoints and NewClient after Close (and on a
// zero-value GCPMultiEndpoint). Calls made then, those of every Spanner client over the
// GCPMultiEndpoint included, fail with a gRPC status CANCELED carrying the same text, which
// the Spanner client does not retry: a closed GCPMultiEndpoint does not reopen.
var ErrClosed = errors.New("spannerme: GCPMultiEndpoint is closed")

// ConfigError describes one configuration mistake; use errors.As to get it. Its fields:
//
//	Group    string // the group (MultiEndpoint) name; "" when the mistake is not in a group
//	Endpoint string // the offending endpoint, as given, if any
//	Index    int    // the endpoint's position in the group's list, or -1
//	Problem  string // what is wrong
//
// It wraps ErrInvalidConfig.
type ConfigError = multiendpoint.ConfigError
