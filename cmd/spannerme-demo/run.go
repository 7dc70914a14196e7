package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"

	"github.com/spannerme/spanner-multiendpoint/internal/fixture"
	"github.com/spannerme/spanner-multiendpoint/internal/rig"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
	"github.com/spannerme/spanner-multiendpoint/spannerme/statuspage"
)

func run(ctx context.Context, f *flags, w io.Writer, logger *slog.Logger) (*summary, error) {
	out := &rig.LockedWriter{W: w} // every line is one Write
	cfg, err := loadConfig(f.config)
	if err != nil {
		return nil, err
	}
	setupCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	be, err := rig.StartBackend(setupCtx, f.emulator)
	if err != nil {
		return nil, fmt.Errorf("starting the backend: %w", err)
	}
	defer be.Close()

	// One fake PSC endpoint per configured endpoint name, all in front of the one backend.
	names := cfg.endpointNames()
	eps := map[string]*spannermetest.Endpoint{}
	addr := map[string]string{}
	nameOf := map[string]string{}
	for _, n := range names {
		e, err := spannermetest.NewEndpoint(be.Addr)
		if err != nil {
			return nil, err
		}
		defer e.Close()
		eps[n], addr[n] = e, e.Addr()
		nameOf[e.Addr()] = strings.TrimSuffix(n, ":443")
	}
	for _, want := range []string{"psc-east4:443", "psc-east4-fallback:443", "psc-west2:443"} {
		if eps[want] == nil {
			return nil, fmt.Errorf("%s: the story needs endpoint %s", cmp.Or(f.config, embeddedName), want)
		}
	}
	east, fallback, west := eps["psc-east4:443"], eps["psc-east4-fallback:443"], eps["psc-west2:443"]

	fmt.Fprintf(out, "spannerme demo: %s at %s, database %s\n", be.Name, be.Addr, be.Database)
	for _, n := range names {
		fmt.Fprintf(out, "  fake PSC endpoint %-24s -> %s\n", n, addr[n])
	}
	opts := cfg.options(addr, f.recoveryTimeout, f.switchingDelay)
	for _, g := range sortedGroups(opts) {
		fmt.Fprintf(out, "  MultiEndpoint %-8q endpoints %v, RecoveryTimeout %v, SwitchingDelay %v\n",
			g, endpointNames(nameOf, opts.MultiEndpoints[g].Endpoints), opts.MultiEndpoints[g].RecoveryTimeout, opts.MultiEndpoints[g].SwitchingDelay)
	}
	def := opts.MultiEndpoints[opts.Default]

	switches := &rig.SwitchLog{}
	// Each fake endpoint carries the name of the PSC endpoint it stands for, so the log
	// lines, the status page and the metrics say psc-east4, not a loopback port.
	named := map[string]spannerme.EndpointOptions{}
	for a, n := range nameOf {
		named[a] = spannerme.EndpointOptions{Name: n}
	}
	settings := spannerme.Settings{ReconnectMaxDelay: f.reconnectMax, Logger: logger, EndpointOptions: named, OnSwitch: func(ev spannerme.SwitchEvent) {
		switches.Add(ev)
		fmt.Fprintf(out, "  >> %s: %s -> %s (%s)\n", ev.Name, nameOf[ev.From], nameOf[ev.To], ev.Reason)
	}}
	// Offline: no credentials, plaintext to the loopback endpoints (F9).
	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(setupCtx, be.Database, fixture.ClientConfig(), opts, settings, spannermetest.ClientOptions()...)
	if err != nil {
		return nil, err
	}
	defer gme.Close()
	defer client.Close()
	if f.http != "" {
		stop := serveStatus(out, f.http, gme)
		defer stop()
	}
	if err := rig.WaitReady(setupCtx, gme, len(names)); err != nil {
		return nil, err
	}

	accounts, err := fixture.Accounts()
	if err != nil {
		return nil, err
	}
	ld := startLoad(ctx, client, accounts, f.readers, f.writers)
	tl := startTimeline(ctx, out, gme, eps, names, nameOf, ld)
	sum := &summary{backend: be.Name, recoveryTimeout: def.RecoveryTimeout, switchingDelay: def.SwitchingDelay,
		reconnectMax: f.reconnectMax}
	story := func() error {
		sleep := func(d time.Duration) error {
			select {
			case <-time.After(d):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := sleep(f.phase); err != nil {
			return err
		}
		tl.say("east4 goes DOWN (listener closed, connections dropped)")
		down := time.Now()
		east.Down()
		ev, err := switches.WaitFor(ctx, def.RecoveryTimeout+30*time.Second, down, func(ev spannerme.SwitchEvent) bool {
			return ev.Name == opts.Default && ev.From == east.Addr()
		})
		if err != nil {
			return fmt.Errorf("no failover: %w", err)
		}
		sum.failover = ev.At.Sub(down)
		tl.say(fmt.Sprintf("failover to %s %v after the fault (RecoveryTimeout %v)", nameOf[ev.To], sum.failover.Round(time.Millisecond), def.RecoveryTimeout))
		if err := sleep(f.phase); err != nil {
			return err
		}

		before := west.Stats().BytesFromBackend
		n, err := countAccounts(spannerme.NewMEContext(ctx, "west"), client)
		if err != nil {
			sum.routedErr = err
			return fmt.Errorf("routed query: %w", err)
		}
		sum.routedServedByWest = west.Stats().BytesFromBackend > before
		tl.say(fmt.Sprintf("query routed to \"west\": %d accounts, served by psc-west2: %v", n, sum.routedServedByWest))

		newOpts := cfg.options(addr, f.recoveryTimeout, f.switchingDelay)
		newOpts.MultiEndpoints[opts.Default].Endpoints = append(newOpts.MultiEndpoints[opts.Default].Endpoints, west.Addr())
		newOpts.MultiEndpoints["west"].Endpoints = []string{west.Addr(), fallback.Addr()}
		if err := gme.UpdateMultiEndpoints(newOpts); err != nil {
			return fmt.Errorf("runtime reconfiguration: %w", err)
		}
		sum.reconfigured = true
		tl.say(fmt.Sprintf("runtime reconfiguration: %s = %v, west = %v",
			opts.Default, endpointNames(nameOf, newOpts.MultiEndpoints[opts.Default].Endpoints), endpointNames(nameOf, newOpts.MultiEndpoints["west"].Endpoints)))
		if err := sleep(f.phase); err != nil {
			return err
		}

		tl.say("east4 comes back UP")
		up := time.Now()
		if err := east.Up(); err != nil {
			return err
		}
		ev, err = switches.WaitFor(ctx, def.SwitchingDelay+30*time.Second, up, func(ev spannerme.SwitchEvent) bool {
			return ev.Name == opts.Default && ev.To == east.Addr()
		})
		if err != nil {
			return fmt.Errorf("no switch-back: %w", err)
		}
		sum.switchBack = ev.At.Sub(up)
		sum.switchingDelay = def.SwitchingDelay
		sum.recoveryTimeout = def.RecoveryTimeout
		tl.say(fmt.Sprintf("switch-back to %s %v after it came up (SwitchingDelay %v, plus reconnecting)", nameOf[ev.To], sum.switchBack.Round(time.Millisecond), def.SwitchingDelay))
		return sleep(f.phase)
	}
	storyErr := story()
	ld.stop()
	tl.stop()
	sum.load = ld.totals()
	if storyErr != nil {
		sum.storyErr = storyErr
	}
	verifyCtx, cancelVerify := context.WithTimeout(context.Background(), time.Minute)
	defer cancelVerify()
	sum.writesFound, sum.verifyErr = ld.verifyWrites(verifyCtx, client)
	sum.print(out)
	return sum, nil
}

func countAccounts(ctx context.Context, client *spanner.Client) (int64, error) {
	var n int64
	err := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT COUNT(*) FROM Accounts"}).Do(func(r *spanner.Row) error {
		return r.Column(0, &n)
	})
	return n, err
}

// serveStatus serves gme's status page on addr and prints its URL; a busy address is a
// warning, not a failure of the demo. It returns the function that stops the server.
func serveStatus(out io.Writer, addr string, gme *spannerme.GCPMultiEndpoint) (stop func()) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(out, "  status page not served: %v (choose another address with -http)\n", err)
		return func() {}
	}
	srv := &http.Server{Handler: statuspage.Handler(gme), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	fmt.Fprintf(out, "  status page: http://%s/ (JSON: http://%s/?format=json)\n", ln.Addr(), ln.Addr())
	return func() {
		srv.Close()
		<-done
	}
}

// sortedGroups returns the group names of o, sorted.
func sortedGroups(o *grpcgcp.GCPMultiEndpointOptions) []string {
	out := make([]string, 0, len(o.MultiEndpoints))
	for n := range o.MultiEndpoints {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// names2 maps endpoint addresses back to their PSC names.
func endpointNames(nameOf map[string]string, addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = nameOf[a]
	}
	return out
}
