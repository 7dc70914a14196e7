package spannerme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"os"
	"reflect"
	"runtime/debug"
	"strconv"

	"cloud.google.com/go/spanner"
	vkit "cloud.google.com/go/spanner/apiv1"
	"cloud.google.com/go/spanner/omni"
	pb "github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/grpc_gcp"
	"google.golang.org/api/option"
	gtransport "google.golang.org/api/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"

	"github.com/spannerme/spanner-multiendpoint/internal/plaintext"
	"github.com/spannerme/spanner-multiendpoint/internal/pool"
)

// How each transport setting of spanner.ClientConfig is handled by the client constructors
// (applied to every endpoint's pool, or refused): docs/transport.md, the one full statement
// of these rules.

// Environment variables the Spanner client reads (cloud.google.com/go/spanner v1.96.1,
// location_router.go and client.go).
const (
	locationAPIEnv  = "GOOGLE_SPANNER_EXPERIMENTAL_LOCATION_API"
	directAccessEnv = "GOOGLE_SPANNER_ENABLE_DIRECT_ACCESS"
)

// clientTransport is what the client constructors derive from a spanner.ClientConfig.
type clientTransport struct {
	// client is the configuration the Spanner client is given.
	client spanner.ClientConfig
	// clientOpts are added to the Spanner client's options.
	clientOpts []option.ClientOption
	// dialOpts reach every pool's dial as dial options, after this package's own and
	// before the caller's client options: the Spanner client's transport defaults (user
	// agent, maximum receive size, compression) and, for OMNI, transport credentials.
	dialOpts []grpc.DialOption
	// poolOpts are added to every pool's client options after the caller's (OMNI credentials
	// and authentication, which win over the caller's as in the Spanner client).
	poolOpts []option.ClientOption
	// omniLogin, if set, gives each pool its own OMNI login (Username and Password).
	omniLogin func(ctx context.Context, endpoint string, opts []option.ClientOption) option.ClientOption
	// minSize and maxSize size each pool when GRPCgcpConfig does not (0: the default rule).
	minSize, maxSize uint32
	// notices are logged once at construction, at Warn: settings turned off or ignored
	// that the user asked for and should act on.
	notices []string
	// exportable: the Spanner client would export native metrics to Cloud Monitoring
	// (turned off in client, unless the client owns the GCPMultiEndpoint).
	exportable bool
	// infos are logged once at construction, at Info: what is expected with a default
	// configuration (native metrics off), which nobody should be paged for.
	infos []string
}

// settingErr is a *ConfigError naming a ClientConfig setting (or an environment variable).
func settingErr(setting, format string, args ...any) error {
	return configErr("", "", -1, "%s: %s", setting, fmt.Sprintf(format, args...))
}

// planTransport validates config's transport settings and derives the clientTransport.
// withDialFunc says the caller dials the pools (GCPMultiEndpointOptions.DialFunc): client
// options cannot reach them then. Errors are *ConfigError naming the setting.
func planTransport(config spanner.ClientConfig, withDialFunc bool) (*clientTransport, error) {
	t := &clientTransport{client: config}
	if config.EnableDirectAccess {
		return nil, settingErr("ClientConfig.EnableDirectAccess",
			"PSC endpoints are not DirectPath (DirectPath replaces an endpoint with a google-c2p target resolved by Traffic Director); leave it false")
	}
	if v := os.Getenv(directAccessEnv); v != "" {
		if on, _ := strconv.ParseBool(v); on {
			t.notices = append(t.notices, directAccessEnv+" is ignored: the endpoints' pools do not use DirectPath")
		}
	}
	if v := os.Getenv(locationAPIEnv); v != "" {
		if on, _ := strconv.ParseBool(v); on {
			return nil, settingErr(locationAPIEnv+"="+v,
				"location-aware routing sends calls straight to Spanner servers, past the MultiEndpoint's endpoints, and closes those connections when it evicts them; unset it for this client")
		}
	}
	//lint:ignore SA1019 IsExperimentalHost is the deprecated spelling of Type OMNI, still honoured by the Spanner client
	omniType := config.Type == spanner.OMNI || config.IsExperimentalHost
	tlsFiles := []struct{ name, value string }{
		{"ClientConfig.CaCertificateFile", config.CaCertificateFile},
		{"ClientConfig.ClientCertificateFile", config.ClientCertificateFile},
		{"ClientConfig.ClientKeyFile", config.ClientKeyFile},
	}
	if config.Type != spanner.OMNI {
		// The Spanner client's own rule (client.go newClientWithConfig).
		if config.UsePlainText {
			return nil, settingErr("ClientConfig.UsePlainText", "can only be set when Type is OMNI")
		}
		for _, f := range tlsFiles {
			if f.value != "" {
				return nil, settingErr(f.name, "can only be set when Type is OMNI")
			}
		}
	}
	if config.Type == spanner.OMNI {
		if err := t.planOmni(config, withDialFunc); err != nil {
			return nil, err
		}
	}
	if omniType {
		// What else Type OMNI does in the Spanner client: no Cloud Monitoring sink for
		// native metrics, and location-aware routing, which is turned off here.
		t.client.Type = spanner.CLOUD
		t.client.IsExperimentalHost = false //lint:ignore SA1019 see omniType
		t.client.DisableNativeMetrics = true
		t.notices = append(t.notices, "location-aware routing (on for Type OMNI) is turned off: calls go through the MultiEndpoint's endpoints")
	}
	if nativeMetricsOn(t.client) {
		t.client.DisableNativeMetrics, t.exportable = true, true
		t.infos = append(t.infos, "the Spanner client's native metrics export to Cloud Monitoring is turned off (ClientConfig.DisableNativeMetrics) for this client, which shares endpoints' pools it does not own: "+
			"its client options have no effect, and the exporter is dialed with them; "+
			"its built-in metrics still reach ClientConfig.ClientMetricsProvider, and the client that owns the pools exports its own")
	}
	//lint:ignore SA1019 the pool sizing rule reads NumChannels, as upstream's multi-endpoint client does
	if n := config.NumChannels; n > 0 {
		t.minSize = uint32(n)
	}
	t.client.NumChannels = 0 //lint:ignore SA1019 the client sees one connection, the front
	if dcp := config.DynamicChannelPoolConfig; dcp.DCPEnabled {
		t.client.DynamicChannelPoolConfig.DCPEnabled = false
		if t.minSize == 0 && dcp.DCPInitialChannels > 0 {
			t.minSize = uint32(dcp.DCPInitialChannels)
		}
		if dcp.DCPMaxChannels > 0 {
			t.maxSize = uint32(dcp.DCPMaxChannels)
		}
		t.notices = append(t.notices, "ClientConfig.DynamicChannelPoolConfig.DCPEnabled is turned off (google-cloud-go#14611): each endpoint's channel pool grows with load instead")
	}
	t.dialOpts = append(t.dialOpts,
		defaultUserAgent{grpc.WithUserAgent(userAgent())},
		// vkit.DefaultClientOptions: responses of any size, not gRPC's 4 MiB default.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if config.Compression == gzip.Name {
		t.dialOpts = append(t.dialOpts, grpc.WithDefaultCallOptions(grpc.UseCompressor(gzip.Name)))
	}
	return t, nil
}

// nativeMetricsOn reports whether the Spanner client would export native metrics to Cloud
// Monitoring with config (cloud.google.com/go/spanner v1.96.1, newClientWithConfig).
func nativeMetricsOn(config spanner.ClientConfig) bool {
	if off, _ := strconv.ParseBool(os.Getenv("SPANNER_DISABLE_BUILTIN_METRICS")); off {
		return false
	}
	return !config.DisableNativeMetrics && os.Getenv(emulatorHostEnv) == ""
}

// planOmni applies Type OMNI's connection settings: the pools' transport credentials and
// authentication, as the Spanner client's own connections would have them.
func (t *clientTransport) planOmni(config spanner.ClientConfig, withDialFunc bool) error {
	creds, err := omniCredentials(config)
	if err != nil {
		return err
	}
	t.dialOpts = append(t.dialOpts, grpc.WithTransportCredentials(creds))
	t.poolOpts = append(t.poolOpts, option.WithGRPCDialOption(grpc.WithTransportCredentials(creds)))
	hasUser, hasPassword := config.Username != "", len(config.Password) > 0
	switch {
	case hasUser != hasPassword:
		return settingErr("ClientConfig.Username and ClientConfig.Password", "both must be set for Omni authentication, or neither")
	case hasUser && withDialFunc:
		return settingErr("ClientConfig.Username",
			"Omni authentication needs the pools dialed with client options; it cannot be combined with GCPMultiEndpointOptions.DialFunc")
	case hasUser:
		user, password := config.Username, append([]byte(nil), config.Password...)
		t.omniLogin = func(ctx context.Context, endpoint string, opts []option.ClientOption) option.ClientOption {
			login := append(append([]option.ClientOption(nil), opts...), option.WithEndpoint(endpoint))
			return option.WithTokenSource(omni.NewTokenSource(ctx, user, password, login))
		}
	default:
		t.poolOpts = append(t.poolOpts, option.WithoutAuthentication())
	}
	// The client's calls all go through the pools: it needs no credentials of its own.
	t.clientOpts = append(t.clientOpts, option.WithoutAuthentication())
	t.client.UsePlainText = false
	t.client.CaCertificateFile, t.client.ClientCertificateFile, t.client.ClientKeyFile = "", "", ""
	t.client.Username, t.client.Password = "", nil
	return nil
}

// omniCredentials returns the transport credentials of Type OMNI, as
// cloud.google.com/go/spanner/omni.ConnectionOptions (v1.96.1) builds them: plaintext, or TLS
// 1.2+ with the CA file as roots and the client certificate for mTLS. Errors name the setting.
func omniCredentials(config spanner.ClientConfig) (credentials.TransportCredentials, error) {
	certFile, keyFile := config.ClientCertificateFile, config.ClientKeyFile
	if config.UsePlainText {
		if config.CaCertificateFile != "" || certFile != "" || keyFile != "" {
			return nil, settingErr("ClientConfig.UsePlainText", "cannot be combined with CaCertificateFile, ClientCertificateFile or ClientKeyFile")
		}
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f := config.CaCertificateFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, settingErr("ClientConfig.CaCertificateFile", "%v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, settingErr("ClientConfig.CaCertificateFile", "%q holds no PEM certificate", f)
		}
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "":
		return nil, settingErr("ClientConfig.ClientCertificateFile", "must be set with ClientKeyFile (mTLS)")
	case keyFile == "":
		return nil, settingErr("ClientConfig.ClientKeyFile", "must be set with ClientCertificateFile (mTLS)")
	default:
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, settingErr("ClientConfig.ClientCertificateFile and ClientKeyFile", "%v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// poolSizes returns a copy of cfg (nil allowed) sized by the sizing rule, with the pool
// sizes of t (ClientConfig's NumChannels and dynamic channel pool) where cfg sets neither.
func (t *clientTransport) poolSizes(cfg *pb.ApiConfig) *pb.ApiConfig {
	return effectiveAPIConfig(cfg, t.minSize, t.maxSize)
}

// gtransportDialer dials one endpoint's pool with gtransport.Dial: the Spanner API defaults,
// then the dial options the GCPMultiEndpoint passes (its own and t.dialOpts), then the
// caller's client options, then t.poolOpts; so the caller's dial options win over this
// package's. The endpoint, a pool of one connection and no given connection are forced.
func (t *clientTransport) gtransportDialer(opts []option.ClientOption) DialFunc {
	return func(ctx context.Context, target string, dopts ...grpc.DialOption) (*grpc.ClientConn, error) {
		all := append(vkit.DefaultClientOptions(), option.WithUserAgent(userAgent()))
		var last []option.ClientOption // trailing dial options go after the caller's
		for _, d := range dopts {
			if _, ok := d.(defaultUserAgent); ok {
				continue // option.WithUserAgent above, which the caller's replaces as on a plain client
			}
			if tr, ok := d.(pool.TrailingDialOption); ok {
				last = append(last, option.WithGRPCDialOption(tr.DialOption))
				continue
			}
			all = append(all, option.WithGRPCDialOption(d))
		}
		all = append(all, opts...)
		all = append(all, t.poolOpts...)
		if t.omniLogin != nil {
			all = append(all, t.omniLogin(ctx, target, append(append([]option.ClientOption(nil), opts...), t.poolOpts...)))
		}
		all = append(all, last...)
		all = append(all, option.WithEndpoint(target), option.WithGRPCConnectionPool(1), option.WithGRPCConn(nil))
		return gtransport.Dial(ctx, all...)
	}
}

// checkPlaintextCredentials refuses, with a *ConfigError, pools that would be dialed in
// plaintext with opts (the caller's client options) while they send credentials: every
// credential but option.WithoutAuthentication() (Application Default Credentials by default,
// a token source, an API key) or t's OMNI login. gRPC does not refuse it: Google's
// credentials do not ask for transport security.
func (t *clientTransport) checkPlaintextCredentials(opts []option.ClientOption) error {
	all := append(append([]option.ClientOption(nil), opts...), t.poolOpts...)
	if t.omniLogin == nil && withoutAuthentication(all) {
		return nil
	}
	if !plaintext.Dials(all) {
		return nil
	}
	what := "a plaintext dial option (insecure transport credentials)"
	if t.omniLogin != nil {
		what = "ClientConfig.UsePlainText with Username"
	}
	return settingErr(what, "the pools would send credentials in plaintext, readable by anyone on the path; "+
		"use TLS, add option.WithoutAuthentication() (the emulator, a plaintext test server), "+
		"or set Settings.SendCredentialsInPlaintext to accept the risk")
}

// withoutAuthentication reports whether opts hold option.WithoutAuthentication().
func withoutAuthentication(opts []option.ClientOption) bool {
	noAuth := reflect.TypeOf(option.WithoutAuthentication())
	for _, o := range opts {
		if reflect.TypeOf(o) == noAuth {
			return true
		}
	}
	return false
}

// defaultUserAgent is this package's user agent for a DialFunc, which takes no client options.
type defaultUserAgent struct{ grpc.DialOption }

// emulatorHostEnv is the variable the Spanner client reads to talk to the emulator.
const emulatorHostEnv = "SPANNER_EMULATOR_HOST"

// userAgent is the Spanner client's user agent ("spanner-go/v1.96.1"), read from the build
// information, followed by this package's name.
func userAgent() string {
	v := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "cloud.google.com/go/spanner" {
				v = "/" + d.Version
			}
		}
	}
	return "spanner-go" + v + " spannerme"
}
