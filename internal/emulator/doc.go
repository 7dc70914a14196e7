// Package emulator starts the Cloud Spanner emulator (emulator_main from the
// Google Cloud SDK) as a child process for tests, on a free loopback port,
// with one instance and one database ready to use.
//
// A test starts a private emulator with [StartTB], or shares one per test
// binary with [Shared] and stops it from TestMain:
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(emulator.StopSharedAfter(m))
//	}
//
//	func TestX(t *testing.T) {
//		emu := emulator.Shared(t)
//		db := emu.NewDatabase(t, ddl) // a fresh database for this test
//		client, err := fixture.NewClient(ctx, emu.Addr(), db)
//		...
//	}
//
// When the binary cannot be found, the test helpers skip the test with a loud
// message, except when the environment variable CI is true: then they fail it,
// so that CI never passes by skipping. See [FindBinary] for where the binary
// is looked for.
//
// Nothing here reads or sets SPANNER_EMULATOR_HOST: every client is given the
// emulator's address and plaintext, unauthenticated options explicitly
// ([Emulator.ClientOptions]), so tests that put other endpoints in front of the
// emulator are not silently redirected to it.
package emulator
