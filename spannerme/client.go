package spannerme

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/internal/configfile"
	"github.com/spannerme/spanner-multiendpoint/internal/export"
	"github.com/spannerme/spanner-multiendpoint/internal/front"
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
	client, err := newPlannedClient(ctx, gme, database, tr, front.Owner)
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
	pl.clientOpts = opts
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

// Several Spanner clients over one GCPMultiEndpoint: a session is valid through every
// endpoint of its instance, so clients of any databases of the instance can share the
// endpoints' pools, groups, health detectors, metrics and status (docs/quickstart.md,
// "Several databases, and database/sql").

// NewGCPMultiEndpointForSpanner returns a GCPMultiEndpoint for Spanner clients that do not
// own it (NewClient, Configurator): its pools are dialed and shaped exactly as those of
// NewMultiEndpointClientWithSettings with the same config, gmeCfg, settings and opts, but no
// client is created, and no client's Close closes it: the caller closes it with Close, after
// (or instead of) closing the clients.
//
// database is any database of the instance the clients use; it names only the default health
// probe, SpannerProbe(database), which settings.Health.Probe replaces. One probe serves every
// database: it asks the instance's backend for a session that does not exist, and whatever
// the backend answers (NOT_FOUND, for a dropped database too) proves the path through the
// endpoint that every database of the instance shares. So each endpoint has one probe
// stream however many clients and databases use it.
//
// config's settings that shape the pools (NumChannels, DynamicChannelPoolConfig, Compression,
// Type OMNI or not, and OMNI's UsePlainText, TLS files, Username and Password) are fixed
// here: every client over the GCPMultiEndpoint must ask for the same ones (NewClient). Its
// other settings are the clients' own. config and gmeCfg are not modified.
//
// Errors: those of NewMultiEndpointClientWithSettings but spanner.NewClientWithConfig's. On
// error every pool dialed so far is closed.
func NewGCPMultiEndpointForSpanner(database string, config spanner.ClientConfig, gmeCfg *grpcgcp.GCPMultiEndpointOptions,
	settings Settings, opts ...option.ClientOption) (*GCPMultiEndpoint, error) {
	gme, _, err := newSpannerGCPMultiEndpoint(database, config, gmeCfg, settings, opts)
	return gme, err
}

// NewClient creates a Spanner client for database ("projects/P/instances/I/databases/D", any
// database of the instance the endpoints serve) whose every call goes through gme, as
// spanner.NewClientWithConfig creates one over its own connections. It does to config and
// opts exactly what NewMultiEndpointClientWithSettings does (transport settings checked, the
// dynamic channel pool and location-aware routing turned off or refused, native metrics off,
// the request-ID header carried; docs/transport.md), with one difference: the client's Close
// leaves gme open. Any number of clients, for any databases of the instance, may share one
// gme; they share its groups, pools, health probes, metrics and Status (Status.Clients
// counts them). gme's health probe is the one it was built with, whatever databases its
// clients use (NewGCPMultiEndpointForSpanner).
//
// opts have no effect; they are taken so that code written for spanner.NewClientWithConfig
// compiles. The pools were dialed with gme's options, credentials and TLS included, and the
// client dials only its front connection, with options of this package (docs/transport.md).
//
// gme may come from NewGCPMultiEndpointForSpanner (the usual way), NewMultiEndpointClient*
// (its own client closes it), or NewGCPMultiEndpoint* (pools dialed with gRPC dial options
// alone: without the Spanner client's transport defaults, such as credentials and responses
// larger than gRPC's 4 MiB default, unless those options give them).
//
// Once gme is closed, the client's calls fail at once with a gRPC status CANCELED carrying
// ErrClosed's text ("spannerme: GCPMultiEndpoint is closed"), which the Spanner client does
// not retry, nor should the caller: gme does not reopen. Close the clients too; a client
// closed after gme is closed closes nothing more.
//
// Safe for concurrent use. config is not modified. Errors: ErrClosed if gme is closed (or a
// zero value); a *ConfigError wrapping ErrInvalidConfig for a database that is not
// projects/P/instances/I/databases/D (refused before anything is sent), naming a refused config setting, or
// a pool setting (NumChannels, DynamicChannelPoolConfig, Compression, Type OMNI's transport)
// other than the one gme's pools were built with (none for NewGCPMultiEndpoint*); any error
// of spanner.NewClientWithConfig.
func NewClient(ctx context.Context, database string, gme *GCPMultiEndpoint, config spanner.ClientConfig, opts ...option.ClientOption) (*spanner.Client, error) {
	if gme == nil {
		return nil, ErrClosed
	}
	return newClient(ctx, gme, database, config)
}

// Configurator returns a function with the signature of go-sql-spanner's
// ConnectorConfig.Configurator (github.com/googleapis/go-sql-spanner, driver.go: "called
// with the spanner.ClientConfig and []option.ClientOption that will be used to create
// connections"), so that database/sql connections reach Spanner through gme:
//
//	connector, err := spannerdriver.CreateConnector(spannerdriver.ConnectorConfig{
//		Project: "p", Instance: "i", Database: "d",
//		Configurator: spannerme.Configurator(gme),
//	})
//
// Each call does to *config what NewClient does and replaces *opts with the options of the
// connection into gme (what opts held had no effect, as NewClient's opts). go-sql-spanner calls the
// function once, when it creates the connector, and keeps config and opts: it creates a
// Spanner client (and a database admin client) with them on the first Connect, closes both
// when the last database/sql connection closes, and creates new ones with the same options
// on the next Connect (driver.go, increaseConnCount and decreaseConnCount). So the
// connection is one pool for the function's whole life, shared by every client created with
// the options it gave, at once or one after another: their Close never closes gme nor the
// pool, and only gme.Close ends it. Status.Configurators counts the functions that have
// configured a client. The admin client's calls go through gme too, to the Default group
// (they carry no group), like any call made without NewMEContext.
//
// Once gme is closed, the clients' calls fail at once with a gRPC status CANCELED carrying
// ErrClosed's text, as NewClient's. The function cannot return an error: when NewClient
// would refuse config (a refused setting, a pool setting other than gme's, see NewClient)
// or gme is closed, it logs the error on gme's logger and leaves *config as it is but for
// NumChannels (0: the client sees one connection), and every client created with *opts
// fails every call at once: with a gRPC status FAILED_PRECONDITION carrying the
// *ConfigError's text for a refused setting, or CANCELED carrying ErrClosed's text when gme
// is closed; the Spanner client retries neither.
//
// The function is safe for concurrent use.
func Configurator(gme *GCPMultiEndpoint) func(config *spanner.ClientConfig, opts *[]option.ClientOption) {
	var (
		once     sync.Once
		fr       *front.Front
		errFront error
	)
	return func(config *spanner.ClientConfig, opts *[]option.ClientOption) {
		if config == nil || opts == nil {
			return // go-sql-spanner always passes both; nothing to configure otherwise
		}
		tr, err := planClient(gme, *config)
		if err == nil {
			once.Do(func() { fr, errFront = newFront(gme, front.Configurator, nil) })
			err = errFront
		}
		if err == nil {
			logTransport(gme, tr)
			*config, *opts = tr.client, spannerClientOptions(tr, fr)
			return
		}
		refusal := status.Error(codes.FailedPrecondition, err.Error())
		if errors.Is(err, ErrClosed) {
			refusal = errClosedCall
		}
		gme.logger().Error("spannerme: Configurator: the Spanner client will fail every call", "err", err)
		pool, perr := front.NewRefused(refusal)
		if perr != nil { // grpc.NewClient of a passthrough target does not fail
			gme.logger().Error("spannerme: Configurator", "err", perr)
			return
		}
		config.NumChannels = 0 //lint:ignore SA1019 the client sees one connection, the refusing one
		*opts = append(append((*opts)[:len(*opts):len(*opts)], option.WithGRPCConn(nil)), gtransport.WithConnPool(pool))
	}
}

// newClient is NewClient of a non-nil gme: it checks database and config against gme, then
// creates the client.
func newClient(ctx context.Context, gme *GCPMultiEndpoint, database string, config spanner.ClientConfig) (*spanner.Client, error) {
	if err := checkDatabase(database); err != nil {
		return nil, err
	}
	tr, err := planClient(gme, config)
	if err != nil {
		return nil, err
	}
	return newPlannedClient(ctx, gme, database, tr, front.Client)
}

// newPlannedClient creates a Spanner client for database over gme with a front of kind
// front.Owner or front.Client, with tr, config's checked planTransport, whose notices it logs.
func newPlannedClient(ctx context.Context, gme *GCPMultiEndpoint, database string, tr *clientTransport, kind front.Kind) (*spanner.Client, error) {
	var exp front.Export // the owner exports native metrics as a plain client (internal/export)
	if kind == front.Owner && tr.exportable {
		conn, err := export.Dial(ctx, gme.pl.clientOpts)
		if err != nil {
			return nil, err
		}
		exp, tr.client.DisableNativeMetrics, tr.infos = conn, false, nil
	}
	logTransport(gme, tr)
	fr, err := newFront(gme, kind, exp)
	if err != nil {
		if exp != nil {
			exp.Close()
		}
		return nil, err
	}
	client, err := spanner.NewClientWithConfig(ctx, database, tr.client, spannerClientOptions(tr, fr)...)
	if err != nil {
		fr.Release() // the owner's closes gme, as the owner's constructor would anyway
		return nil, err
	}
	return client, nil
}

// planClient checks config for a Spanner client over gme (NewClient, Configurator) and
// returns its planTransport. Errors: ErrClosed; a *ConfigError for a refused setting or a
// pool setting other than gme's.
func planClient(gme *GCPMultiEndpoint, config spanner.ClientConfig) (*clientTransport, error) {
	if gme == nil || gme.zero() {
		return nil, ErrClosed
	}
	tr, err := planTransport(config, !gme.pl.ownDialer)
	if err != nil {
		return nil, err
	}
	if err := checkPoolSettings(gme.pl.poolSettings, config); err != nil {
		return nil, err
	}
	return tr, nil
}

// logTransport logs tr's notices on gme's logger, once for each client configured with it.
func logTransport(gme *GCPMultiEndpoint, tr *clientTransport) {
	for _, n := range tr.infos {
		gme.log.Info("spannerme: " + n)
	}
	for _, n := range tr.notices {
		gme.log.Warn("spannerme: " + n)
	}
}

// spannerClientOptions returns the options of a Spanner client over fr: tr's client options,
// then fr's, with which the client dials its front connection. The caller's client options
// are not among them: they shape the endpoints' pools (and the owner's exporter), and on the
// front its dial options would run twice (interceptors) or hold it (grpc.WithBlock).
func spannerClientOptions(tr *clientTransport, fr *front.Front) []option.ClientOption {
	return append(append([]option.ClientOption(nil), tr.clientOpts...), fr.Options()...)
}

// poolSettingsOf returns config's settings that shape the pools (planTransport applies them
// to the pools, not to the client), in a fixed order.
func poolSettingsOf(c spanner.ClientConfig) []poolSetting {
	dcp := ""
	if d := c.DynamicChannelPoolConfig; d.DCPEnabled {
		dcp = fmt.Sprintf("DCPEnabled, DCPInitialChannels %d, DCPMaxChannels %d", d.DCPInitialChannels, d.DCPMaxChannels)
	}
	omni := ""
	if c.Type == spanner.OMNI {
		omni = "OMNI"
	}
	password := ""
	if len(c.Password) > 0 {
		password = fmt.Sprintf("%x", sha256.Sum256(c.Password))
	}
	return []poolSetting{
		{name: "ClientConfig.NumChannels", value: strconv.Itoa(c.NumChannels)}, //lint:ignore SA1019 it sizes the pools, as upstream's multi-endpoint client
		{name: "ClientConfig.DynamicChannelPoolConfig", value: dcp},
		{name: "ClientConfig.Compression", value: c.Compression},
		{name: "ClientConfig.Type", value: omni},
		{name: "ClientConfig.UsePlainText", value: strconv.FormatBool(c.UsePlainText)},
		{name: "ClientConfig.CaCertificateFile", value: c.CaCertificateFile},
		{name: "ClientConfig.ClientCertificateFile", value: c.ClientCertificateFile},
		{name: "ClientConfig.ClientKeyFile", value: c.ClientKeyFile},
		{name: "ClientConfig.Username", value: c.Username},
		{name: "ClientConfig.Password", value: password, secret: true},
	}
}

// checkPoolSettings refuses a config whose pool settings differ from built, those a
// GCPMultiEndpoint's pools were built with (nil: a zero ClientConfig's, for
// NewGCPMultiEndpoint*): a client cannot change shared pools. The error is a *ConfigError
// naming the first setting that differs.
func checkPoolSettings(built []poolSetting, config spanner.ClientConfig) error {
	how := "NewGCPMultiEndpointForSpanner or NewMultiEndpointClient*"
	if built == nil {
		built = poolSettingsOf(spanner.ClientConfig{})
		how = "NewGCPMultiEndpoint* (dial options), which is a zero ClientConfig for this purpose"
	}
	for i, s := range poolSettingsOf(config) {
		b := built[i]
		if s.value == b.value {
			continue
		}
		show := func(v string) string {
			switch {
			case v == "":
				return "unset"
			case s.secret:
				return "set"
			}
			return strconv.Quote(v)
		}
		here, there := show(s.value), show(b.value)
		if here == there { // two different secrets
			here, there = "one value", "another"
		}
		return settingErr(s.name, "%s here, but the GCPMultiEndpoint's pools were built with %s by %s; "+
			"pool settings belong to the GCPMultiEndpoint: give every client the settings it was built with",
			here, there, how)
	}
	return nil
}
