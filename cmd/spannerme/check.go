package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// The steps of one endpoint's check, in order.
const (
	stepResolve  = "resolve"
	stepTCP      = "tcp"
	stepTLS      = "tls"
	stepGRPC     = "grpc"
	stepSpanner  = "spanner"
	stepDatabase = "database"
)

var steps = []string{stepResolve, stepTCP, stepTLS, stepGRPC, stepSpanner, stepDatabase}

// Step outcomes.
const (
	statusOK      = "ok"
	statusFailed  = "failed"
	statusSkipped = "skipped"
)

// stepResult is one step of one endpoint's check.
type stepResult struct {
	Step    string        `json:"step"`
	Status  string        `json:"status"` // ok, failed or skipped
	Latency time.Duration `json:"-"`
	// LatencyMS is Latency in milliseconds, for --json.
	LatencyMS float64 `json:"latencyMs"`
	Detail    string  `json:"detail,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// endpointResult is one endpoint's check.
type endpointResult struct {
	Endpoint string `json:"endpoint"`
	// Name is the endpoint's name (endpoints.<endpoint>.name in the file); omitted when it
	// has none.
	Name      string `json:"name,omitempty"`
	Authority string `json:"authority,omitempty"`
	OK        bool   `json:"ok"`
	// TotalMS is the time of every step together, in milliseconds.
	TotalMS float64      `json:"totalMs"`
	Steps   []stepResult `json:"steps"`
}

type groupEndpoint struct {
	Priority int `json:"priority"`
	// Tier is the endpoint's tier in a group with tiers (a nested list in the file's
	// endpoints), 0 the top tier; absent for a group without tiers.
	Tier *int `json:"tier,omitempty"`
	endpointResult
}

// tiersOf returns the tier of each endpoint of group name, by its position in the group's
// Endpoints (the tiers flattened); nil for a group without tiers.
func tiersOf(fc *spannerme.FileConfig, name string) []int {
	ts, ok := fc.Settings.Tiers[name]
	if !ok {
		return nil
	}
	var out []int
	for i, tier := range ts.Tiers {
		for range tier {
			out = append(out, i)
		}
	}
	return out
}

type groupResult struct {
	Name    string `json:"name"`
	Default bool   `json:"default"`
	OK      bool   `json:"ok"`
	Working int    `json:"working"`
	// First is the working endpoint of the highest priority, where the group's calls would
	// go, FirstName its name (omitted when it has none), FirstMS its total time. Empty when
	// none works.
	First     string          `json:"first,omitempty"`
	FirstName string          `json:"firstName,omitempty"`
	FirstMS   float64         `json:"firstMs,omitempty"`
	Endpoints []groupEndpoint `json:"endpoints"`
}

type report struct {
	Config   string        `json:"config"`
	Database string        `json:"database"`
	OK       bool          `json:"ok"`
	Groups   []groupResult `json:"groups"`
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var c common
	c.register(fs, 10*time.Second)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spannerme check --config FILE --database projects/P/instances/I/databases/D [flags]\n\n"+
			"Checks every endpoint of every group: name resolution, TCP connect, TLS handshake, gRPC ready,\n"+
			"one Spanner call (GetSession of a session that does not exist; NOT_FOUND is an answer) and the\n"+
			"database (a session created, SELECT 1 in it, the session deleted; nothing is written).\n"+
			"--timeout bounds reading the configuration file, and each endpoint's check. Exit status: 0 when every group has a working endpoint\n"+
			"(every step passed), 1 when a group has none, 2 on a bad configuration file or bad flags.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fc, err := c.parse(ctx, fs, args, stderr)
	if err != nil {
		return badArgs(err)
	}
	rep := check(ctx, &c, fc)
	if *asJSON {
		// Every string escaped as JSON allows: a server's text or a group's name drives no
		// terminal (jsonSafe), and the output stays valid JSON with the same values.
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "spannerme check: %s\n", printable(err.Error()))
			return exitFailed
		}
		if _, err := stdout.Write(jsonSafe(out.Bytes())); err != nil {
			fmt.Fprintf(stderr, "spannerme check: %s\n", printable(err.Error()))
			return exitFailed
		}
	} else {
		printTable(stdout, rep)
	}
	if !rep.OK {
		return exitFailed
	}
	return exitOK
}

// check checks every endpoint of fc once, concurrently, and reports them per group.
func check(ctx context.Context, c *common, fc *spannerme.FileConfig) *report {
	authority, endpointName := map[string]string{}, map[string]string{}
	for e, o := range fc.Settings.EndpointOptions {
		if t, err := parseTarget(e); err == nil {
			authority[t.grpc], endpointName[t.grpc] = o.Authority, o.Name
		}
	}
	results := map[string]*endpointResult{}
	var wg sync.WaitGroup
	for _, g := range fc.Options.MultiEndpoints {
		for _, e := range g.Endpoints {
			if results[e] != nil {
				continue
			}
			r := &endpointResult{Endpoint: e}
			results[e] = r
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(ctx, c.timeout)
				defer cancel()
				t, err := parseTarget(e)
				if err == nil {
					r.Authority, r.Name = authority[t.grpc], endpointName[t.grpc]
				}
				r.Steps = checkEndpoint(ctx, c, t, err, r.Authority)
				r.OK = r.Steps[len(r.Steps)-1].Status == statusOK
				for _, s := range r.Steps {
					r.TotalMS += s.LatencyMS
				}
			})
		}
	}
	wg.Wait()

	rep := &report{Config: c.config, Database: c.database, OK: true}
	names := make([]string, 0, len(fc.Options.MultiEndpoints))
	for name := range fc.Options.MultiEndpoints {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { // the default group first, then by name
		if (names[i] == fc.Options.Default) != (names[j] == fc.Options.Default) {
			return names[i] == fc.Options.Default
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		g := groupResult{Name: name, Default: name == fc.Options.Default}
		tiers := tiersOf(fc, name)
		for i, e := range fc.Options.MultiEndpoints[name].Endpoints {
			r := results[e]
			ge := groupEndpoint{Priority: i, endpointResult: *r}
			if i < len(tiers) {
				ge.Tier = &tiers[i]
			}
			g.Endpoints = append(g.Endpoints, ge)
			if r.OK {
				g.Working++
				if g.First == "" {
					g.First, g.FirstName, g.FirstMS = e, r.Name, r.TotalMS
				}
			}
		}
		g.OK = g.Working > 0
		rep.OK = rep.OK && g.OK
		rep.Groups = append(rep.Groups, g)
	}
	return rep
}

// checkEndpoint runs the steps in order; after a failure the rest are skipped.
func checkEndpoint(ctx context.Context, c *common, t target, parseErr error, authority string) []stepResult {
	var out []stepResult
	failed := false
	do := func(step string, f func() (detail string, skip bool, err error)) {
		r := stepResult{Step: step}
		if failed {
			r.Status, r.Detail = statusSkipped, "an earlier step failed"
			out = append(out, r)
			return
		}
		start := time.Now()
		detail, skip, err := f()
		r.Latency = time.Since(start)
		r.LatencyMS = float64(r.Latency.Microseconds()) / 1000
		r.Detail = bounded.Text(detail, bounded.ServerText)
		switch {
		case err != nil:
			// crypto/tls's errors start "tls: ", the step's name, which the output prints
			// before the error already.
			// The text may quote a server: it is kept cut to bounded.ServerText bytes.
			r.Status, r.Error, failed = statusFailed, bounded.Text(strings.TrimPrefix(err.Error(), step+": "), bounded.ServerText), true
		case skip:
			r.Status, r.Latency, r.LatencyMS = statusSkipped, 0, 0
		default:
			r.Status = statusOK
		}
		out = append(out, r)
	}

	var addrs []string
	do(stepResolve, func() (string, bool, error) {
		switch {
		case parseErr != nil:
			return "", false, parseErr
		case t.network == "unix":
			addrs = []string{t.host}
			return "unix socket: nothing to resolve", true, nil
		case t.isIP():
			addrs = []string{net.JoinHostPort(t.host, t.port)}
			return "IP address: nothing to resolve", true, nil
		}
		ips, err := net.DefaultResolver.LookupHost(ctx, t.host)
		if err != nil {
			return "", false, err
		}
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip, t.port))
		}
		return strings.Join(ips, ", "), false, nil
	})

	var conn net.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	do(stepTCP, func() (string, bool, error) {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, t.network, addrs[0])
		if err != nil {
			return "", false, err
		}
		return "connected to " + addrs[0], false, nil
	})

	do(stepTLS, func() (string, bool, error) {
		if c.plaintext {
			return "--plaintext: no TLS", true, nil
		}
		return tlsHandshake(ctx, conn, t, authority)
	})

	var cc *grpc.ClientConn
	defer func() {
		if cc != nil {
			cc.Close()
		}
	}()
	do(stepGRPC, func() (string, bool, error) {
		var err error
		cc, err = dialEndpoint(ctx, c, t.grpc, authority)
		if err != nil {
			return "", false, err
		}
		cc.Connect()
		for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
			if s == connectivity.TransientFailure || s == connectivity.Shutdown {
				why := connectionError(ctx, cc)
				return "", false, fmt.Errorf("the connection failed (%s)%s%s", s, why, connectionHint(why, c.plaintext))
			}
			if !cc.WaitForStateChange(ctx, s) {
				return "", false, fmt.Errorf("not ready within the time limit (still %s): %w", s, ctx.Err())
			}
		}
		return "READY", false, nil
	})

	do(stepSpanner, func() (string, bool, error) {
		return spannerCall(ctx, cc, c.database)
	})

	do(stepDatabase, func() (string, bool, error) {
		return databaseCall(ctx, cc, c.database)
	})
	return out
}

// connectionError returns ": " and why cc's last connection attempt failed, or "". gRPC
// has no accessor for it, but fails a fail-fast call on a failed connection at once with
// UNAVAILABLE and that error in the message.
func connectionError(ctx context.Context, cc *grpc.ClientConn) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := cc.Invoke(ctx, "/google.spanner.v1.Spanner/GetSession", &spannerpb.GetSessionRequest{}, &spannerpb.Session{})
	if st, _ := status.FromError(err); st.Code() == codes.Unavailable && st.Message() != "" {
		return ": " + st.Message()
	}
	return ""
}

// tlsHandshake runs a TLS handshake on conn as gRPC would: with the authority's host (else
// the endpoint's) as server name, the system's roots, and ALPN h2.
func tlsHandshake(ctx context.Context, conn net.Conn, t target, authority string) (string, bool, error) {
	name := t.host
	if t.network == "unix" {
		name = "localhost"
	}
	if authority != "" {
		name = authority
		if h, _, err := net.SplitHostPort(authority); err == nil {
			name = h
		}
	}
	tc := tls.Client(conn, &tls.Config{ServerName: strings.Trim(name, "[]"), NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		var certErr *tls.CertificateVerificationError
		var recordErr tls.RecordHeaderError
		switch {
		case errors.As(err, &certErr) && net.ParseIP(name) != nil && authority == "":
			return "", false, fmt.Errorf("%w (an endpoint dialed by IP address usually needs an authority: endpoints.%q.authority in the configuration file)", err, t.endpoint)
		case errors.As(err, &recordErr):
			return "", false, fmt.Errorf("%w (the server does not speak TLS: --plaintext --no-auth if it should not)", err)
		}
		return "", false, err
	}
	st := tc.ConnectionState()
	if st.NegotiatedProtocol != "h2" {
		return "", false, fmt.Errorf("the server did not negotiate HTTP/2 (ALPN h2), which gRPC needs")
	}
	detail := "server name " + name
	if len(st.PeerCertificates) > 0 {
		detail += fmt.Sprintf(", certificate valid until %s", st.PeerCertificates[0].NotAfter.UTC().Format(time.DateOnly))
	}
	return detail, false, nil
}

// checkSession names a session that does not exist: its GetSession costs the backend a
// lookup, creates nothing, and needs no session of the checker's own.
const checkSession = "spannerme-check-no-such-session"

// spannerCall makes one GetSession call. NOT_FOUND for the session is an answer from the
// backend; NOT_FOUND for the database is not a working configuration.
func spannerCall(ctx context.Context, cc *grpc.ClientConn, database string) (string, bool, error) {
	name := database + "/sessions/" + checkSession
	ctx = metadata.AppendToOutgoingContext(ctx, "google-cloud-resource-prefix", database,
		"x-goog-request-params", "name="+url.QueryEscape(name))
	_, err := spannerpb.NewSpannerClient(cc).GetSession(ctx, &spannerpb.GetSessionRequest{Name: name})
	switch st, _ := status.FromError(err); {
	case err == nil:
		return "GetSession answered", false, nil
	case st.Code() == codes.NotFound && strings.Contains(strings.ToLower(st.Message()), "database not found"):
		return "", false, fmt.Errorf("the backend answered, but the database does not exist: %s", st.Message())
	case st.Code() == codes.NotFound:
		return "GetSession answered NOT_FOUND, as expected: " + st.Message(), false, nil
	default:
		return "", false, fmt.Errorf("GetSession: %s: %s", st.Code(), st.Message())
	}
}

// deleteTimeout bounds the DeleteSession of the database step, which runs even when the
// check's own time limit has passed.
const deleteTimeout = 5 * time.Second

// databaseCall proves the database with the credentials given: it creates a (regular)
// session in it, runs SELECT 1 in that session as a single-use read-only transaction, and
// deletes the session. It writes nothing; the session is the only thing it creates, and a
// session whose DeleteSession fails is removed by Spanner after an hour idle
// (https://cloud.google.com/spanner/docs/sessions). A database that does not exist fails
// CreateSession with NOT_FOUND, credentials that may not use it with PERMISSION_DENIED.
func databaseCall(ctx context.Context, cc *grpc.ClientConn, database string) (string, bool, error) {
	client := spannerpb.NewSpannerClient(cc)
	withParams := func(ctx context.Context, params string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "google-cloud-resource-prefix", database, "x-goog-request-params", params)
	}
	s, err := client.CreateSession(withParams(ctx, "database="+url.QueryEscape(database)), &spannerpb.CreateSessionRequest{Database: database})
	if err != nil {
		st, _ := status.FromError(err)
		switch st.Code() {
		case codes.NotFound:
			return "", false, fmt.Errorf("the database does not exist: CreateSession: %s: %s", st.Code(), st.Message())
		case codes.PermissionDenied, codes.Unauthenticated:
			return "", false, fmt.Errorf("the credentials may not use the database: CreateSession: %s: %s", st.Code(), st.Message())
		}
		return "", false, fmt.Errorf("CreateSession: %s: %s", st.Code(), st.Message())
	}
	sessionCtx := func(ctx context.Context) context.Context {
		return withParams(ctx, "session="+url.QueryEscape(s.GetName()))
	}
	deleted := func() string {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
		defer cancel()
		if _, err := client.DeleteSession(sessionCtx(ctx), &spannerpb.DeleteSessionRequest{Name: s.GetName()}); err != nil {
			st, _ := status.FromError(err)
			return fmt.Sprintf("; DeleteSession failed (%s: %s): Spanner removes the session after an hour idle", st.Code(), st.Message())
		}
		return "; session deleted"
	}
	// No transaction selector: a single-use read-only transaction with strong reads.
	rs, err := client.ExecuteSql(sessionCtx(ctx), &spannerpb.ExecuteSqlRequest{Session: s.GetName(), Sql: "SELECT 1"})
	if err != nil {
		st, _ := status.FromError(err)
		return "", false, fmt.Errorf("SELECT 1: %s: %s%s", st.Code(), st.Message(), deleted())
	}
	if rows := rs.GetRows(); len(rows) != 1 || len(rows[0].GetValues()) != 1 || rows[0].GetValues()[0].GetStringValue() != "1" {
		return "", false, fmt.Errorf("SELECT 1 answered %v, not one row holding 1%s", rows, deleted())
	}
	return "session created, SELECT 1 answered 1" + deleted(), false, nil
}

// printTable writes the report for people.
func printTable(w io.Writer, rep *report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\t#\tENDPOINT\tRESOLVE\tTCP\tTLS\tGRPC\tSPANNER\tDATABASE\tRESULT")
	for _, g := range rep.Groups {
		for _, e := range g.Endpoints {
			priority := fmt.Sprint(e.Priority)
			if e.Tier != nil {
				priority = fmt.Sprintf("%d (tier %d)", e.Priority, *e.Tier)
			}
			cells := []string{printable(g.Name), priority, printable(labeled(e.Endpoint, e.Name))}
			for _, s := range e.Steps {
				cells = append(cells, cell(s))
			}
			result := "FAILED"
			if e.OK {
				result = "ok"
			}
			fmt.Fprintln(tw, strings.Join(append(cells, result), "\t"))
		}
	}
	tw.Flush()

	var errs []string
	seen := map[string]bool{}
	for _, g := range rep.Groups {
		for _, e := range g.Endpoints {
			for _, s := range e.Steps {
				if s.Status == statusFailed && !seen[e.Endpoint] {
					seen[e.Endpoint] = true
					errs = append(errs, printable(fmt.Sprintf("  %s: %s: %s", labeled(e.Endpoint, e.Name), s.Step, s.Error)))
				}
			}
		}
	}
	if len(errs) > 0 {
		fmt.Fprintln(w, "\nErrors:")
		fmt.Fprintln(w, strings.Join(errs, "\n"))
	}
	fmt.Fprintln(w, "\nGroups:")
	var bad []string
	for _, g := range rep.Groups {
		name := g.Name
		if g.Default {
			name += " (default)"
		}
		fmt.Fprintf(w, "  %-20s %d of %d endpoints working", printable(name), g.Working, len(g.Endpoints))
		if g.First != "" {
			fmt.Fprintf(w, "; calls would go to %s (checked in %s)", printable(labeled(g.First, g.FirstName)), formatLatency(time.Duration(g.FirstMS*float64(time.Millisecond))))
		}
		fmt.Fprintln(w)
		if !g.OK {
			bad = append(bad, printable(g.Name))
		}
	}
	if len(bad) == 0 {
		fmt.Fprintln(w, "\nOK: every group has a working endpoint.")
	} else {
		fmt.Fprintf(w, "\nFAILED: no working endpoint in group %s.\n", strings.Join(bad, ", "))
	}
}

// labeled writes an endpoint for people: "address (name)" when it has a name, else the
// address alone.
func labeled(endpoint, name string) string {
	if name == "" {
		return endpoint
	}
	return endpoint + " (" + name + ")"
}

// cell is a step in the table: its latency when it passed, FAILED, or "-" when skipped.
func cell(s stepResult) string {
	switch s.Status {
	case statusOK:
		return formatLatency(s.Latency)
	case statusFailed:
		return "FAILED"
	}
	return "-"
}

func formatLatency(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
	case d < time.Second:
		return fmt.Sprintf("%.0fms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
