// Package spannerme gives one Cloud Spanner client (cloud.google.com/go/spanner) several
// endpoints, such as Private Service Connect (PSC) endpoints in several regions, with
// fallback, routing and runtime reconfiguration.
//
// # MultiEndpoints
//
// A MultiEndpoint (also called a group) is a named list of endpoints in priority order. It
// uses its first endpoint while that endpoint is available: a connection to it is ready, and
// it is not ejected by health from call outcomes (HealthSettings: an endpoint whose calls
// keep failing or stalling on live connections is ejected until a probe passes). When that
// endpoint is not available it waits RecoveryTimeout, then fails over to the next available
// endpoint; when a higher endpoint is available again it switches back after SwitchingDelay.
// A call picks a group through its context (NewMEContext, or grpcgcp.NewMEContext: both use
// the same key), else it uses the Default group. Each unique endpoint has one grpcgcp channel
// pool, shared by every group that lists it, and every pool stays connected even when it
// carries no traffic (a warm standby), so failover and switch-back do not wait for a
// connection.
//
// The configuration types are upstream's: grpcgcp.GCPMultiEndpointOptions with
// multiendpoint.MultiEndpointOptions groups (Endpoints, RecoveryTimeout, SwitchingDelay), and
// the functions have upstream's signatures, so code written for
// spanner.NewMultiEndpointClient compiles against this package by changing the import (the
// returned GCPMultiEndpoint is this package's type).
//
//	client, gme, err := spannerme.NewMultiEndpointClient(ctx, database, &grpcgcp.GCPMultiEndpointOptions{
//		MultiEndpoints: map[string]*multiendpoint.MultiEndpointOptions{
//			"default": {Endpoints: []string{"psc-east4:443", "psc-east4-fallback:443"},
//				RecoveryTimeout: 2 * time.Second, SwitchingDelay: 10 * time.Second},
//			"west": {Endpoints: []string{"psc-west2:443", "psc-east4:443"}},
//		},
//		Default: "default",
//	})
//	iter := client.Single().Query(spannerme.NewMEContext(ctx, "west"), stmt) // routed to "west"
//	err = gme.UpdateMultiEndpoints(newConfig)                                // at runtime
//
// # Endpoints
//
// An endpoint is "host:port", "[v6]:port", a gRPC target URI ("dns:///host:port",
// "passthrough:///addr", "unix:path"), or "https://host[:port]", which is read as host:port
// with port 443 by default. Anything else is a configuration error.
//
// # Sessions and routing
//
// The Spanner client creates, refreshes and deletes its sessions (with multiplexed sessions,
// one session per client) on its own contexts, which name no group. Those session calls use
// the Default group while its current endpoint is available, and otherwise the first group,
// by name, whose current endpoint is (the Default group when none is); a session call whose
// context names a group uses that group. Queries, reads, DML, transactions and mutations use
// the group of the context they are given, with that session: a session is valid through
// every endpoint of one Spanner instance. So a client that starts while the Default group is
// down creates its session through another group, and calls routed to a group that is up
// are served.
//
// Routing picks the network path, not the replica: which replica serves a read-only request
// is Spanner's choice unless the request carries DirectedReadOptions
// (https://cloud.google.com/spanner/docs/directed-reads). A group with a policy
// (Settings.DirectedReads, the configuration file's directedReads) adds it to the read-only
// queries and reads routed through it that carry none of their own: single-use ones, those
// of read-only transactions (begun by the request, or seen beginning read-only through this
// GCPMultiEndpoint), and partitioned queries. Read-write transactions, DML and partitioned
// DML go without it, as Spanner refuses directed reads there; a request's own options always
// win; groups without a policy send every request unchanged. GroupStatus.DirectedReads and
// the status page show each group's policy.
//
// # Failure semantics
//
//   - Failover: while the current endpoint is down and before RecoveryTimeout has passed,
//     calls to it fail fast with UNAVAILABLE (or wait while it is reconnecting), which the
//     Spanner client retries; after RecoveryTimeout, calls go to the next available endpoint.
//     A call never moves to another endpoint in the middle: a stream that breaks is resumed
//     by the Spanner client on the current endpoint.
//   - Removal by UpdateMultiEndpoints: the endpoint's pool takes no new calls, its in-flight
//     calls (unary and streams) complete, and it is closed when they are done or after
//     Settings.DrainTimeout.
//   - Close: calls in flight end with CANCELED, as on a closed grpc.ClientConn. Closing the
//     Spanner client of NewMultiEndpointClient* closes the GCPMultiEndpoint and its pools.
//   - Several databases: clients of NewClient and Configurator (database/sql through
//     go-sql-spanner) share one GCPMultiEndpoint of NewGCPMultiEndpointForSpanner, its pools,
//     probes, metrics and status; their Close leaves it open, and only gme.Close closes it
//     (docs/quickstart.md, "Several databases, and database/sql").
//   - Configuration errors never half-apply: the previous configuration stays in force.
//
// # Channels and load
//
// Each endpoint's pool keeps MinSize channels (gRPC connections) connected, sends each call to
// the channel with the fewest active streams, and adds a channel, up to MaxSize, whenever
// every channel carries 100 streams (the limit per connection of Google's front ends); see
// DefaultPoolSize for the sizing rule. There is no session affinity by default: the Spanner
// client's calls all carry its one multiplexed session, and binding them to the session's
// channel would carry 100 concurrent queries per endpoint at most (measured: 64 concurrent
// queries use 4 of 4 channels; 450 concurrent streams through a 100-stream frontend open a
// fifth). ClientConfig.NumChannels is the number of channels each endpoint keeps connected,
// not a cap. SessionAffinityConfig gives upstream's affinity.
//
// # The Spanner client's transport
//
// The Spanner client is given the GCPMultiEndpoint as its connection; how each of its
// transport settings, client options and dial options reaches the endpoints' pools (applied,
// or refused with a *ConfigError naming it) is in docs/transport.md:
// https://github.com/spannerme/spanner-multiendpoint/blob/main/docs/transport.md
//
// # Configuration files
//
// LoadConfig reads a YAML or JSON file into GCPMultiEndpointOptions and Settings (strictly:
// mistakes are a *ConfigFileError naming the line and field), and WatchConfig applies every
// later edit of it through UpdateMultiEndpoints, keeping the last good configuration when an
// edit is invalid. Settings.EndpointOptions sets the authority (TLS server name) of an
// endpoint dialed by IP address, and a name (such as "psc-east4") shown next to the
// endpoint's address in Status, the status page, log lines, metrics and the CLI. The command
// cmd/spannerme checks a file's endpoints.
//
// # Observability
//
// GCPMultiEndpoint.Status is a view of every group (current endpoint, each endpoint's
// state, recent switches) and every endpoint's channel pool (connectivity, calls in flight,
// the last connection error classified as a ConnErrorKind: refused, dns, timeout, tls, ...).
// After Close it reports Closed and nothing alive. Package spannerme/statuspage serves it as
// an HTML page and as JSON (statuspage.Handler). Settings.Logger gets one line per
// transition of an endpoint (down with its reason, up, ejected, readmitted) and per switch,
// never one per call. Each pool's
// PoolStatus.Health shows its health from call outcomes. Metrics go to an OpenTelemetry meter
// provider (Settings.MeterProvider, else the Spanner client's
// ClientConfig.OpenTelemetryMeterProvider, else the global one); docs/observability.md lists
// the instruments. A call whose context carries a recording span adds the attributes
// AttrMultiEndpoint and AttrEndpoint to it.
//
// # Testing and offline use
//
// Package spannermetest provides fake PSC endpoints (fault-injecting TCP proxies) to test
// failover configurations on one machine, and starts offline backends for them: an in-memory
// Spanner (NewSpanner) or the installed emulator (StartEmulator). A client built without
// credentials and network access can hang or fail looking for credentials for its built-in
// metrics: give it option.WithoutAuthentication() and
// spanner.ClientConfig{DisableNativeMetrics: true}. SPANNER_EMULATOR_HOST collapses every
// group to the emulator, so failover is not exercised (docs/transport.md).
package spannerme
