package spannerme

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/backoff"
)

// Settings tunes what upstream's GCPMultiEndpointOptions cannot express. The zero value is
// ready to use: every zero field takes the documented default.
type Settings struct {
	// ReconnectMaxDelay bounds gRPC's reconnect backoff for each endpoint's channels, so that
	// a recovered endpoint is noticed within about this long. Zero or negative means 5s (gRPC's own
	// default is 120s: https://github.com/grpc/grpc/blob/master/doc/connection-backoff.md).
	ReconnectMaxDelay time.Duration
	// MinConnectTimeout is how long one connection attempt (TCP, TLS and HTTP/2 handshakes)
	// may take before it is abandoned and retried. Zero or negative means 10s (gRPC's default
	// is 20s).
	// Failover does not wait for it: an endpoint counts as not available as soon as it has no
	// ready connection.
	MinConnectTimeout time.Duration
	// KeepaliveTime is how long a connection may stay silent before gRPC pings it (HTTP/2
	// keepalive), which is how a connection that silently stopped carrying bytes is found
	// dead: after KeepaliveTime plus KeepaliveTimeout without an answer. gRPC uses at least
	// 10s (grpc-go, keepalive.ClientParameters). Zero means 120s, the value the
	// Cloud Spanner Go client uses (cloud.google.com/go/spanner, client.go); negative turns
	// keepalive off. Servers close connections that ping more often than they allow (grpc-go
	// servers: once per 5 minutes by default), so lower it only with care.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long gRPC waits for a keepalive ping's answer before it closes
	// the connection. Zero or negative means 20s, gRPC's default. KeepaliveTime plus
	// KeepaliveTimeout bounds how long a current endpoint that silently stopped answering
	// (packets dropped, no reset) keeps its calls before the pool leaves READY and the group
	// can fail over.
	KeepaliveTimeout time.Duration
	// KeepaliveWithoutCalls also pings connections that carry no call. gRPC pings only
	// connections with an active call otherwise, so a warm standby whose path silently dies
	// (no reset, no refusal) stays READY, and Available, until calls fail over to it and find
	// out. Enable it when the servers permit pings without calls (grpc-go servers do not by
	// default). False by default.
	KeepaliveWithoutCalls bool
	// DrainTimeout is how long an endpoint's pool that is no longer configured keeps serving
	// its in-flight calls before it is closed anyway. Zero or negative means 5 minutes.
	DrainTimeout time.Duration
	// EndpointOptions holds options of single endpoints' pools (such as the authority of a PSC
	// endpoint dialed by IP address, or the endpoint's name), by endpoint as written in the
	// configuration ("https://host" forms match their host:port). An endpoint's options apply
	// when its pool is dialed: at creation, or when UpdateMultiEndpoints adds the endpoint; a
	// pool keeps them while its endpoint stays configured, except the Name, which a
	// ConfigWatcher's reload changes at once (EndpointOptions.Name). Entries of endpoints not
	// configured (yet) are allowed. Nil means none. A bad entry (or a Name that two entries
	// give) is a *ConfigError naming the endpoint.
	EndpointOptions map[string]EndpointOptions
	// DirectedReads holds the directed read policy of groups, by group name: the
	// DirectedReadOptions (https://cloud.google.com/spanner/docs/directed-reads) added to each
	// read-only query and read routed through the group (unary and streaming ExecuteSql and
	// Read, partitioned queries included) that has none of its own, so that, say, the "west"
	// group's readers read west replicas, or an analytics group reads only READ_ONLY ones.
	// Which requests count as read-only, and what is sent unchanged (read-write
	// transactions, DML, a request with options of its own): docs/configuration.md,
	// "Directed reads per group". The caller's request messages are never modified. A group
	// without an entry, and every group when DirectedReads is nil, sends its requests
	// unchanged at no cost. Entries of
	// groups not configured (yet) are allowed; they apply once such a group exists. The
	// options are copied when the GCPMultiEndpoint is created (and at each reload of a watched
	// file, which replaces them with the file's). Each entry must set includeReplicas or
	// excludeReplicas with 1 to MaxReplicaSelections selections, each naming a location, a
	// type (READ_ONLY or READ_WRITE) or both; else a *ConfigError naming the group.
	DirectedReads map[string]*spannerpb.DirectedReadOptions
	// Hedging turns on hedged read-only streaming queries and reads in groups, by group name
	// (HedgingSettings; docs/configuration.md, "Hedged reads"). A group without an entry,
	// and every group when Hedging is nil (the default), never hedges, at no cost. Entries
	// of groups not configured (yet) are allowed. The entries are read when the
	// GCPMultiEndpoint is created; a watched file's reload replaces them with the file's
	// (WatchConfig). A bad entry is a *ConfigError naming the group.
	Hedging map[string]HedgingSettings
	// Logger receives one line per transition, never one per call (docs/observability.md,
	// "Logs", lists them). Nil means slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the OpenTelemetry metrics (docs/observability.md, "Metrics", lists
	// the instruments). Nil means the Spanner client's ClientConfig.OpenTelemetryMeterProvider
	// for NewMultiEndpointClient*, else otel.GetMeterProvider() (a no-op until an SDK is
	// installed there). Pass noop.NewMeterProvider() to record nothing. Two
	// GCPMultiEndpoints with the same group names should not share a provider: their
	// gauges would collide.
	MeterProvider metric.MeterProvider
	// OnSwitch, if not nil, is called for every change of a group's current endpoint, in order,
	// on a goroutine of the GCPMultiEndpoint's own with no lock held, shortly after the change
	// took effect. It may call the GCPMultiEndpoint (even Close); a slow OnSwitch delays only
	// later events. Events not yet delivered when Close is called are dropped.
	OnSwitch func(SwitchEvent)
	// Health tunes endpoint health from call outcomes: ejection of endpoints whose calls fail
	// or stall on live connections, and probes. On by default; see HealthSettings.
	Health HealthSettings
	// OnHealth, if not nil, is called for every ejection and readmission of an endpoint, in
	// order with the switch events, on the goroutine that calls OnSwitch, with no lock held
	// (it may call the GCPMultiEndpoint). Events not yet delivered when Close is called are
	// dropped. Each is also logged (ejection at Warn, readmission at Info).
	OnHealth func(HealthEvent)
	// SwitchingJitter spreads switch-backs over a part of SwitchingDelay, so that a fleet of
	// clients that see an endpoint recover at the same moment do not all move their traffic
	// back at the same instant. It is a fraction in [0, 1]: a switch that waits
	// SwitchingDelay (back to a higher endpoint, or to one a reconfiguration raised) lands at
	// a random moment, uniform in [SwitchingDelay, SwitchingDelay×(1+SwitchingJitter)), after
	// the endpoint's return to available: never before SwitchingDelay. The moment is drawn
	// once per return, in each group on its own. Zero means no jitter (exactly
	// SwitchingDelay); with SwitchingDelay 0 there is none either. The sum saturates at the
	// largest time.Duration (about 292 years): a huge SwitchingDelay never wraps around to an
	// immediate switch. Outside [0, 1] (or NaN) is a *ConfigError naming the field.
	SwitchingJitter float64
	// SendCredentialsInPlaintext lets the client constructors dial the pools in plaintext
	// (a plaintext dial option among their client options, or Type OMNI's UsePlainText with
	// a Username) while the pools send credentials (Application Default Credentials, a
	// token source, an API key, an OMNI login): anyone on the path can read and reuse them.
	// False (the zero value) refuses that combination with a *ConfigError before anything
	// is dialed; option.WithoutAuthentication() (the emulator, a plaintext test server) or
	// TLS needs no opt-in. It is meant for a plaintext hop that stays on the host, such as
	// a local TLS-terminating proxy. NewGCPMultiEndpoint* (gRPC dial options only) do not
	// read it.
	SendCredentialsInPlaintext bool
	// Tiers partitions groups' endpoints into tiers of equal priority, by group name
	// (TierSettings; docs/tiers.md): the tier is the unit of failover, and calls are spread
	// over a tier's available members by latency. A group without an entry, and every group
	// when Tiers is nil, is a strict priority list as without tiers, at no cost. Entries of
	// groups not configured (yet) are allowed; they apply once such a group exists. Ignored
	// with the emulator (SPANNER_EMULATOR_HOST). A bad entry, or a configured group whose
	// endpoints are not its tiers flattened, is a *ConfigError naming the group and endpoint.
	Tiers map[string]TierSettings
	// RejectUnknownGroups fails a call whose context names a group that is not configured
	// (NewMEContext with a misspelled name, say) with codes.InvalidArgument, which the Spanner
	// client does not retry, and a message naming the group and the groups there are, instead
	// of routing it to the default group. False (the zero value) routes such calls to the
	// default group as upstream does. Either way the call is counted in
	// Status().UnknownGroups and the spannerme.client.unknown_group_calls metric, and the
	// first call naming each name is logged (docs/production.md, "Unknown group names").
	// Read when the GCPMultiEndpoint is created.
	RejectUnknownGroups bool
}

// validate returns a *ConfigError naming the first invalid field.
func (s Settings) validate() error {
	if j := s.SwitchingJitter; math.IsNaN(j) || j < 0 || j > 1 {
		return &ConfigError{Index: -1, Problem: fmt.Sprintf("Settings.SwitchingJitter %v is outside [0, 1]", j)}
	}
	return s.Health.validate()
}

// reconnectBackoff is every pool's reconnect backoff, and young deaths' (internal/pool).
func (s Settings) reconnectBackoff() backoff.Config {
	d := backoff.DefaultConfig
	return backoff.Config{BaseDelay: min(d.BaseDelay, s.ReconnectMaxDelay), Multiplier: d.Multiplier, Jitter: d.Jitter, MaxDelay: s.ReconnectMaxDelay}
}

func (s Settings) withDefaults() Settings {
	if s.ReconnectMaxDelay <= 0 {
		s.ReconnectMaxDelay = 5 * time.Second
	}
	if s.MinConnectTimeout <= 0 {
		s.MinConnectTimeout = 10 * time.Second
	}
	if s.KeepaliveTime == 0 {
		s.KeepaliveTime = 120 * time.Second
	}
	if s.KeepaliveTimeout <= 0 {
		s.KeepaliveTimeout = 20 * time.Second
	}
	if s.DrainTimeout <= 0 {
		s.DrainTimeout = 5 * time.Minute
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.MeterProvider == nil {
		s.MeterProvider = otel.GetMeterProvider()
	}
	s.Health = s.Health.withDefaults()
	return s
}

// parsedSettings is a validated Settings with its defaults, and its EndpointOptions and
// DirectedReads parsed.
type parsedSettings struct {
	Settings
	endpointOpts endpointOptions
	directed     directedReads
	hedging      hedgeSettings
	tiers        map[string]tierConfig
}

// parse validates s and returns it with its defaults. Errors: a *ConfigError naming the
// first invalid field or endpoint option.
func (s Settings) parse() (parsedSettings, error) {
	if err := s.validate(); err != nil {
		return parsedSettings{}, err
	}
	eo, err := parseEndpointOptions(s.EndpointOptions)
	if err != nil {
		return parsedSettings{}, err
	}
	dr, err := parseDirectedReads(s.DirectedReads)
	if err != nil {
		return parsedSettings{}, err
	}
	h, err := parseHedging(s.Hedging)
	if err != nil {
		return parsedSettings{}, err
	}
	tiers, err := parseTiers(s.Tiers)
	if err != nil {
		return parsedSettings{}, err
	}
	return parsedSettings{Settings: s.withDefaults(), endpointOpts: eo, directed: dr, hedging: h, tiers: tiers}, nil
}

// restartFields lists the settings and pool settings that want (a file's Settings and
// GRPCgcpConfig) asks for and that differ from have (what a GCPMultiEndpoint was created
// with: its Settings, its effective GRPCgcpConfig, and the pool sizes of its ClientConfig).
func restartFields(want, have Settings, wantGcp, haveGcp *pb.ApiConfig, poolMin, poolMax uint32) []string {
	var out []string
	want = want.withDefaults()
	off := func(d time.Duration) time.Duration { return max(d, -1) }
	for _, f := range []struct {
		name       string
		want, have any
	}{
		{"drainTimeout", want.DrainTimeout, have.DrainTimeout},
		{"keepaliveTime", off(want.KeepaliveTime), off(have.KeepaliveTime)},
		{"keepaliveTimeout", want.KeepaliveTimeout, have.KeepaliveTimeout},
		{"keepaliveWithoutCalls", want.KeepaliveWithoutCalls, have.KeepaliveWithoutCalls},
		{"minConnectTimeout", want.MinConnectTimeout, have.MinConnectTimeout},
		{"reconnectMaxDelay", want.ReconnectMaxDelay, have.ReconnectMaxDelay},
		{"switchingJitter", want.SwitchingJitter, have.SwitchingJitter},
		{"health", want.Health.comparable(), have.Health.comparable()},
	} {
		if f.want != f.have {
			out = append(out, "settings."+f.name)
		}
	}
	// The pools were made from the creator's GRPCgcpConfig filled in by effectiveAPIConfig;
	// fill the file's in the same way (an absent poolSize or sessionAffinity means the
	// default, not "unchanged"), so dropping a setting counts like changing it.
	wantPool := effectiveAPIConfig(wantGcp, poolMin, poolMax).GetChannelPool()
	havePool := haveGcp.GetChannelPool()
	if wantPool.GetMinSize() != havePool.GetMinSize() || wantPool.GetMaxSize() != havePool.GetMaxSize() {
		out = append(out, "poolSize")
	}
	if hasAffinity(wantGcp) != hasAffinity(haveGcp) {
		out = append(out, "sessionAffinity")
	}
	return out
}

// hasAffinity reports whether c binds calls to channels (SessionAffinityConfig).
func hasAffinity(c *pb.ApiConfig) bool { return len(c.GetMethod()) > 0 }
