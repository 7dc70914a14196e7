package spannerme

import (
	"context"
	"fmt"
	"os"
	"regexp"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
)

// NewMultiEndpointClient is NewMultiEndpointClientWithConfig with the Spanner client's
// default configuration, as upstream's spanner.NewMultiEndpointClient.
func NewMultiEndpointClient(ctx context.Context, database string, gmeCfg *grpcgcp.GCPMultiEndpointOptions, opts ...option.ClientOption) (*spanner.Client, *GCPMultiEndpoint, error) {
	//lint:ignore SA1019 the same default configuration as upstream's spanner.NewMultiEndpointClient
	return NewMultiEndpointClientWithConfig(ctx, database, spanner.ClientConfig{SessionPoolConfig: spanner.DefaultSessionPoolConfig}, gmeCfg, opts...)
}

// NewMultiEndpointClientWithConfig creates a Spanner client whose every call goes through a
// GCPMultiEndpoint built from gmeCfg, with upstream's signature. See
// NewMultiEndpointClientWithSettings.
func NewMultiEndpointClientWithConfig(ctx context.Context, database string, config spanner.ClientConfig, gmeCfg *grpcgcp.GCPMultiEndpointOptions, opts ...option.ClientOption) (*spanner.Client, *GCPMultiEndpoint, error) {
	return NewMultiEndpointClientWithSettings(ctx, database, config, gmeCfg, Settings{}, opts...)
}

// NewMultiEndpointClientWithSettings creates a Spanner client for database
// ("projects/P/instances/I/databases/D") whose every call goes through a GCPMultiEndpoint
// built from gmeCfg, and returns both. Use the GCPMultiEndpoint to reconfigure endpoints at
// runtime and to read their status; route a call to a group with NewMEContext.
//
//   - Transport: opts (credentials, TLS, user agent, dial options, ...) apply to every
//     endpoint's pool, and config's transport settings apply to every pool or are refused
//     with a *ConfigError naming the setting (docs/transport.md is the account of each).
//   - Channels: each endpoint's pool is sized by the rule of DefaultPoolSize
//     (config.NumChannels sets MinSize when GRPCgcpConfig does not), with no session
//     affinity (docs/channels.md). The Spanner client itself sees one connection.
//   - GRPCgcpConfig is used as given (copied), its pool sizes completed by that rule; a
//     Method list in it applies affinity as grpcgcp does (SessionAffinityConfig is
//     upstream's).
//   - DialFunc in gmeCfg, if set, replaces gtransport.Dial (opts do not reach it), and
//     SPANNER_EMULATOR_HOST points every group at the emulator (docs/transport.md); the two
//     together are refused, since a DialFunc would dial the emulator with its own TLS and
//     credentials.
//   - Plaintext: pools that opts would dial in plaintext while sending credentials (any but
//     option.WithoutAuthentication()) are refused, unless settings.SendCredentialsInPlaintext.
//   - Endpoint health from call outcomes is on unless settings.Health.Disabled; its probe is
//     SpannerProbe(database) unless settings.Health.Probe is set (HealthSettings).
//   - Closing the Spanner client closes the GCPMultiEndpoint and every pool (the client
//     built it, so it owns it); closing the GCPMultiEndpoint as well is harmless. Nothing
//     else closes them. More clients, for any database of the instance,
//     can share the GCPMultiEndpoint through NewClient and Configurator; they stop working
//     when this client closes it (build a GCPMultiEndpoint no client owns with
//     NewGCPMultiEndpointForSpanner instead).
//   - The GCPMultiEndpoint's metrics go to settings.MeterProvider, else to
//     config.OpenTelemetryMeterProvider, else to the global meter provider.
//
// gmeCfg and config are not modified. On any error everything dialed is closed. Errors: a
// *ConfigError wrapping ErrInvalidConfig for a database that is not
// projects/P/instances/I/databases/D, an invalid gmeCfg or settings, a refused config
// setting, credentials over plaintext, or a DialFunc with SPANNER_EMULATOR_HOST, each before
// any endpoint is dialed; a dial error naming the endpoint; any error of spanner.NewClientWithConfig.
func NewMultiEndpointClientWithSettings(ctx context.Context, database string, config spanner.ClientConfig,
	gmeCfg *grpcgcp.GCPMultiEndpointOptions, settings Settings, opts ...option.ClientOption) (*spanner.Client, *GCPMultiEndpoint, error) {
	gme, tr, err := newSpannerGCPMultiEndpoint(database, config, gmeCfg, settings, opts)
	if err != nil {
		return nil, nil, err
	}
	client, err := newPlannedClient(ctx, gme, database, tr, ownerFront)
	if err != nil {
		gme.Close() // closes the front too
		return nil, nil, err
	}
	return client, gme, nil
}

// newSpannerGCPMultiEndpoint builds the GCPMultiEndpoint of the client constructors: pools
// dialed with gtransport and opts, shaped by config's transport settings, probed with
// SpannerProbe(database) unless settings name a probe. It also returns config's
// planTransport, which a client over the GCPMultiEndpoint built with config uses as it is.
// Nothing is logged of config's settings here: the client constructors log them for each
// client. Errors: those of NewMultiEndpointClientWithSettings but the client's.
func newSpannerGCPMultiEndpoint(database string, config spanner.ClientConfig,
	gmeCfg *grpcgcp.GCPMultiEndpointOptions, settings Settings, opts []option.ClientOption) (*GCPMultiEndpoint, *clientTransport, error) {
	if err := checkDatabase(database); err != nil {
		return nil, nil, err
	}
	parsed, err := parseConfig(gmeCfg)
	if err != nil {
		return nil, nil, err
	}
	if settings.Health.Probe == nil {
		settings.Health.Probe = SpannerProbe(database)
	}
	if settings.MeterProvider == nil {
		settings.MeterProvider = config.OpenTelemetryMeterProvider // nil: the global one
	}
	s, err := settings.parse()
	if err != nil {
		return nil, nil, err
	}
	tr, err := planTransport(config, gmeCfg.DialFunc != nil)
	if err != nil {
		return nil, nil, err
	}
	host, eopts := emulatorOptions()
	if host != "" && gmeCfg.DialFunc != nil {
		// The emulator's options (plaintext, no credentials) are client options, which a
		// DialFunc does not receive: it would dial the emulator with its own TLS and
		// credentials, production ones included.
		return nil, nil, settingErr("GCPMultiEndpointOptions.DialFunc",
			"cannot be combined with %s=%s: the emulator needs plaintext without credentials, which a DialFunc does not receive; unset one of them",
			emulatorHostEnv, bounded.Text(host, configfile.MaxQuoted))
	}
	if host == "" && gmeCfg.DialFunc == nil && !settings.SendCredentialsInPlaintext {
		if err := tr.checkPlaintextCredentials(opts); err != nil {
			return nil, nil, err
		}
	}
	pl := plumbing{poolSettings: poolSettingsOf(config)}
	cfg := *gmeCfg // shallow copy: the caller's struct is never written
	opts = append([]option.ClientOption(nil), opts...)
	if host != "" {
		pl.emulator = emulatorScheme.ReplaceAllString(host, "")
		opts = append(opts, eopts...)
		s.Logger.Warn("spannerme: "+emulatorHostEnv+" is set: every MultiEndpoint points at the emulator, so failover is not exercised",
			"emulator", host)
	}
	cfg.GRPCgcpConfig = tr.poolSizes(cfg.GRPCgcpConfig)
	pl.poolMin, pl.poolMax = tr.minSize, tr.maxSize
	if cfg.DialFunc == nil {
		cfg.DialFunc = tr.gtransportDialer(opts)
		pl.callDefaults = clientDefaultCallOptions(opts) // e.g. WaitForReady
		pl.ownDialer = true
	}
	gme, err := newGCPMultiEndpoint(parsed, &cfg, s, pl, tr.dialOpts)
	if err != nil {
		return nil, nil, err
	}
	return gme, tr, nil
}

// emulatorOptions returns SPANNER_EMULATOR_HOST and, when it is set, the client options the
// Spanner client uses for the emulator (plaintext, no authentication), as upstream.
func emulatorOptions() (string, []option.ClientOption) {
	host := os.Getenv(emulatorHostEnv)
	if host == "" {
		return "", nil
	}
	return host, []option.ClientOption{
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication()}
}

// databasePattern is the Spanner client's rule for a database name (validDBPattern in
// cloud.google.com/go/spanner v1.96.1, client.go), checked before any endpoint is dialed.
var databasePattern = regexp.MustCompile(`^projects/[^/]+/instances/[^/]+/databases/[^/]+$`)

// checkDatabase refuses, as a *ConfigError wrapping ErrInvalidConfig, a database name that is
// not projects/P/instances/I/databases/D, so that it is refused before anything is dialed.
func checkDatabase(database string) error {
	if !databasePattern.MatchString(database) {
		return &ConfigError{Index: -1, Problem: fmt.Sprintf("database %q is not projects/P/instances/I/databases/D", database)}
	}
	return nil
}

var emulatorScheme = regexp.MustCompile(`^(http://|https://|passthrough:///)`)
