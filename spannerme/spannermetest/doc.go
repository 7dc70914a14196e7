// Package spannermetest provides fake Private Service Connect (PSC) endpoints
// for tests of multi-endpoint Spanner clients, in the spirit of
// net/http/httptest.
//
// A fake PSC endpoint ([Endpoint]) is a TCP proxy that listens on its own
// loopback address (127.0.0.1 and a port chosen by the OS) and forwards every
// connection to one backend address, for example an in-process gRPC server,
// spannertest's in-memory server or the Cloud Spanner emulator. A test puts
// several endpoints in front of ONE shared backend and points each endpoint
// of a MultiEndpoint configuration at a different [Endpoint.Addr]. It can then
// make one endpoint fail the way networks fail ([Endpoint.Down],
// [Endpoint.Reset], [Endpoint.Drop], [Endpoint.Blackhole], [Endpoint.Slow])
// and tell from [Endpoint.Stats] which endpoint served a call.
//
// Why one shared backend: Spanner sessions (and transactions) live in the
// backend. Real PSC endpoints of one Spanner instance all reach the same
// service, so a session created through one endpoint is valid through every
// other. Two independent fake servers behind two endpoints would instead make
// every failover look like "session not found".
//
// Fault modes at a glance:
//
//	Pass       bytes flow normally (the default).
//	Down       the listener is closed: new dials fail with ECONNREFUSED and
//	           live connections are reset. Up re-listens on the same port.
//	Reset      (an action, not a mode) live connections are reset; new ones
//	           are accepted and forwarded; the mode returns to Pass.
//	Drop       (an action) like Reset, but the mode is kept: after Blackhole,
//	           clients reconnect into the black hole.
//	Blackhole  connections are accepted (the TCP handshake completes) but no
//	           byte is forwarded either way, so a gRPC/HTTP2 handshake never
//	           completes; the backend is not even dialed.
//	Slow       added one-way latency and a bandwidth limit per direction.
//
// A fake Google frontend ([Frontend]) is the other kind of fault: a gRPC
// server at which HTTP/2 ends, as it ends at the Google frontend behind a
// real PSC endpoint, forwarding every call to one backend. Its connections
// stay up while the service behind it fails, so a client's channel stays
// READY while calls fail or stall:
//
//	Pass          calls are forwarded (the default).
//	FailAll       every call fails with one code (UNAVAILABLE,
//	              RESOURCE_EXHAUSTED, ...); the backend sees none.
//	FailFraction  a seeded random fraction of calls fails with one code.
//	Hang          calls are accepted and never answered until their
//	              caller gives up.
//	SetLatency    added delay before each call is forwarded, failed or
//	              held; composes with the modes.
//	SetRetryDelay the injected errors carry a RetryInfo with this delay;
//	              composes with the modes.
//
// It counts calls per method ([Frontend.Stats]), can keep the request
// messages it forwards ([WithRequestRecording], [Frontend.Requests]), so a
// test can assert what each call carried, can record each call with its
// Spanner request ID and outcome ([WithAttemptRecording],
// [Frontend.Attempts]), so a test with several frontends can tell which one
// served each attempt of a request, and takes the limits of a
// Google frontend as options: concurrent streams per connection
// ([WithMaxConcurrentStreams]) and connection age, ended by GOAWAY
// ([WithMaxConnectionAge]).
//
// A Frontend can stand alone in front of the backend, or behind an
// [Endpoint] (client → Endpoint → Frontend → backend) to combine network
// faults with service faults.
//
// The backend can be started here too: [NewSpanner] starts an in-memory Spanner with a
// schema, [StartEmulator] the installed Cloud Spanner emulator with an instance and a
// database; [ClientOptions] and [ClientConfig] configure a client for them (plaintext, no
// credentials, no metrics export).
//
// Everything listens on 127.0.0.1 only. Endpoint.Close and Frontend.Close
// stop every goroutine the endpoint or frontend started before they return,
// so tests can check for leaks (for example with go.uber.org/goleak).
package spannermetest
