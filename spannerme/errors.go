package spannerme

import (
	"errors"

	"github.com/spannerme/spanner-multiendpoint/internal/multiendpoint"
)

// ErrInvalidConfig is wrapped by every configuration error returned by NewGCPMultiEndpoint,
// UpdateMultiEndpoints and the client constructors; test for it with errors.Is. The error's
// text names the offending group and endpoint.
var ErrInvalidConfig = multiendpoint.ErrInvalidConfig

// ErrClosed is wrapped by the error UpdateMultiEndpoints returns after Close.
var ErrClosed = errors.New("spannerme: GCPMultiEndpoint is closed")

// ConfigError describes one configuration mistake: the group (MultiEndpoint name), the
// endpoint and its position when the mistake concerns one, and the problem. It wraps
// ErrInvalidConfig.
type ConfigError = multiendpoint.ConfigError
