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
// A call uses the group its context names (NewMEContext), else the Default group. The Spanner
// client's own session calls name no group: they go to the Default group while its current
// endpoint is available, else to another group whose endpoint is, so a client that starts
// while the Default group is down still gets its session (docs/failure-semantics.md,
// "Sessions"). Routing picks the network path, not the replica; a group can also pick the
// replicas of its read-only requests (Settings.DirectedReads; docs/configuration.md,
// "Directed reads per group"), and hedge its slow read-only streaming queries and reads on
// another of its endpoints (Settings.Hedging; docs/configuration.md, "Hedged reads").
//
// # Failure semantics
//
// What happens on failover, switch-back, flapping, silent death, removal by
// UpdateMultiEndpoints and Close, and what a call returns while no endpoint of its group can
// connect, is in docs/failure-semantics.md. In short: a call in flight is never moved to
// another endpoint: it completes, or fails with an error the Spanner client retries (with
// CANCELED after Close); a configuration error never half-applies. Explain turns a failed
// call's error into one naming each group without an available endpoint, each endpoint and
// its last connection error: the cause of the Spanner client's own "timeout / context
// canceled during getting session." (docs/production.md, "Troubleshooting").
//
// # Channels and load
//
// Each endpoint's channel pool sends each call to the channel with the fewest streams and
// grows under load (DefaultPoolSize is the sizing rule); there is no session affinity by
// default (SessionAffinityConfig gives upstream's). Why, and what ClientConfig.NumChannels
// means here: docs/channels.md.
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
// Package spannermetest provides fake PSC endpoints (fault-injecting TCP proxies) and offline
// backends for them (an in-memory Spanner, the installed emulator), to test a failover
// configuration on one machine; what an offline client needs is in docs/testing.md, "Offline
// clients".
package spannerme
