package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/spannerme/spanner-multiendpoint/internal/bounded"
	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

func runQuery(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	var c common
	c.register(fs, 30*time.Second)
	group := fs.String("group", "", "the group (MultiEndpoint) to query through; default: the file's default group")
	sql := fs.String("sql", "", "the SQL query (required)")
	connectTimeout := fs.Duration("connect-timeout", 3*time.Second,
		"how long the group may take to have an available endpoint; past it the query stops and says why each endpoint is not available")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spannerme query --config FILE --database D [--group NAME] --sql \"SELECT 1\" [flags]\n\n"+
			"Runs one query through a group, as an application would, and prints the rows and the endpoint\n"+
			"that served them. Only the group's endpoints are dialed. When no endpoint of the group is\n"+
			"available within --connect-timeout, the query stops and prints why, endpoint by endpoint.\n"+
			"Exit status: 0 on success, 1 when the query fails, 2 on a bad configuration file or bad flags.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fc, err := c.parse(fs, args, stderr)
	if err != nil {
		return badArgs(err)
	}
	if *sql == "" {
		fmt.Fprintln(stderr, "spannerme query: --sql is required")
		return exitBadArgs
	}
	if *group == "" {
		*group = fc.Options.Default
	}
	if _, ok := fc.Options.MultiEndpoints[*group]; !ok {
		fmt.Fprintf(stderr, "spannerme query: --group %q is not a group of %s\n", *group, printable(c.config))
		return exitBadArgs
	}
	if *connectTimeout <= 0 {
		fmt.Fprintln(stderr, "spannerme query: --connect-timeout must be positive")
		return exitBadArgs
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	// Every ExecuteStreamingSql call records the endpoint whose pool it went through.
	var served servedBy
	opts := append(c.clientOptions(), option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(served.intercept)))
	settings := fc.Settings
	settings.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	only, settings := onlyGroup(fc, *group, settings)
	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, c.database,
		spanner.ClientConfig{DisableNativeMetrics: true}, only, settings, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "spannerme query: %s\n", printable(bounded.Text(err.Error(), bounded.ServerText)))
		return exitFailed
	}
	defer client.Close()

	qctx, stopQuery := context.WithCancelCause(ctx)
	defer stopQuery(nil)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if !waitAvailable(qctx, gme, *group, *connectTimeout) {
			stopQuery(errNoEndpoint)
		}
	}()
	n, err := printRows(stdout, client.Single().Query(spannerme.NewMEContext(qctx, *group), spanner.Statement{SQL: *sql}))
	stopQuery(nil)
	<-watched
	if err != nil {
		why := spannerme.Explain(err, gme.Status())
		if errors.Is(context.Cause(qctx), errNoEndpoint) {
			fmt.Fprintf(stderr, "spannerme query: stopped: no endpoint of group %q was available within --connect-timeout %v\n", printable(*group), *connectTimeout)
		} else {
			fmt.Fprintf(stderr, "spannerme query: %s\n", printable(bounded.Text(err.Error(), bounded.ServerText)))
		}
		if why != nil {
			printWhy(stderr, why, c.plaintext)
		}
		return exitFailed
	}
	st := gme.Status()
	current, names := "", map[string]string{}
	for _, p := range st.Pools {
		if !p.Retired {
			names[p.Endpoint] = p.Name
		}
	}
	for _, g := range st.Groups {
		if g.Name == *group {
			current = g.Current
		}
	}
	last := served.last()
	fmt.Fprintf(stdout, "(%d rows; served by endpoint %s of group %s, whose current endpoint is %s)\n", n,
		printable(labeled(last, names[last])), printable(*group), printable(labeled(current, names[current])))
	return exitOK
}

// servedBy records the endpoint of the last streaming query.
type servedBy struct {
	mu       sync.Mutex // guards endpoint
	endpoint string
}

func (s *servedBy) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if strings.HasSuffix(method, "/ExecuteStreamingSql") {
		s.mu.Lock()
		s.endpoint = cc.Target()
		s.mu.Unlock()
	}
	return streamer(ctx, desc, cc, method, opts...)
}

func (s *servedBy) last() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endpoint == "" {
		return "(unknown)"
	}
	return s.endpoint
}

// printRows writes the rows as a table with a header and returns how many there were.
func printRows(w io.Writer, it *spanner.RowIterator) (int, error) {
	defer it.Stop()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	n := 0
	for {
		row, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return n, err
		}
		if n == 0 {
			names := make([]string, 0, row.Size())
			for _, c := range row.ColumnNames() {
				names = append(names, printable(c))
			}
			fmt.Fprintln(tw, strings.Join(names, "\t"))
		}
		cells := make([]string, row.Size())
		for i := range cells {
			var v spanner.GenericColumnValue
			if err := row.Column(i, &v); err != nil {
				return n, err
			}
			cells[i] = printable(formatValue(v.Value))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
		n++
	}
	return n, tw.Flush()
}

// formatValue prints a Spanner value: strings as they are (Spanner sends INT64 and
// TIMESTAMP values as strings too), NULL, and JSON for the rest.
func formatValue(v *structpb.Value) string {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_NullValue, nil:
		return "NULL"
	}
	b, err := json.Marshal(v.AsInterface())
	if err != nil {
		return v.String()
	}
	return string(b)
}

// errNoEndpoint is the cause of a query stopped because its group had no available
// endpoint within --connect-timeout.
var errNoEndpoint = errors.New("no available endpoint")

// onlyGroup returns fc's options and settings reduced to the group name, made the default:
// the query dials only that group's endpoints, and logs nothing about groups it does not
// use.
func onlyGroup(fc *spannerme.FileConfig, name string, s spannerme.Settings) (*grpcgcp.GCPMultiEndpointOptions, spannerme.Settings) {
	o := *fc.Options
	o.MultiEndpoints = map[string]*multiendpoint.MultiEndpointOptions{name: fc.Options.MultiEndpoints[name]}
	o.Default = name
	if dr := s.DirectedReads[name]; dr != nil {
		s.DirectedReads = map[string]*spannerpb.DirectedReadOptions{name: dr}
	} else {
		s.DirectedReads = nil
	}
	return &o, s
}

// waitAvailable waits until an endpoint of group name is Available, and reports whether one
// was within d (false too when ctx ends first). It reads gme's Status every 50ms.
func waitAvailable(ctx context.Context, gme *spannerme.GCPMultiEndpoint, name string, d time.Duration) bool {
	limit := time.NewTimer(d)
	defer limit.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, g := range gme.Status().Groups {
			if g.Name != name {
				continue
			}
			for _, e := range g.Endpoints {
				if e.State == spannerme.Available {
					return true
				}
			}
		}
		select {
		case <-ctx.Done():
			return true // the query ended: nothing to stop
		case <-limit.C:
			return false
		case <-tick.C:
		}
	}
}

// printWhy prints each endpoint of the groups in why, and why it is not available, as check
// would find it: its last connection error (with a hint at a likely mistake), or its
// ejection.
func printWhy(w io.Writer, why *spannerme.NoEndpointError, plaintext bool) {
	for _, g := range why.Groups {
		fmt.Fprintf(w, "group %s has no available endpoint:\n", printable(g.Group))
		for _, e := range g.Endpoints {
			cause := "no connection attempt has failed yet"
			switch {
			case e.Ejected != "":
				cause = "ejected by health from call outcomes: " + e.Ejected
			case e.LastError != nil:
				cause = fmt.Sprintf("%s: %s%s", e.LastError.Kind, e.LastError.Message, connectionHint(e.LastError.Message, plaintext))
			}
			fmt.Fprintf(w, "  %d %s: %s, pool %s: %s\n", e.Priority, printable(labeled(e.Endpoint, e.Name)), e.State, e.Connectivity,
				printable(bounded.Text(cause, bounded.ServerText)))
		}
	}
	fmt.Fprintln(w, `"spannerme check" with the same flags tests each step of each endpoint (docs/cli.md)`)
}
