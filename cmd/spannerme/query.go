package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/spanner"
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
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spannerme query --config FILE --database D [--group NAME] --sql \"SELECT 1\" [flags]\n\n"+
			"Runs one query through a group, as an application would, and prints the rows and the endpoint\n"+
			"that served them. Exit status: 0 on success, 1 when the query fails, 2 on a bad configuration\n"+
			"file or bad flags.\n\nFlags:\n")
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
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	// Every ExecuteStreamingSql call records the endpoint whose pool it went through.
	var served servedBy
	opts := append(c.clientOptions(), option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(served.intercept)))
	settings := fc.Settings
	settings.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, gme, err := spannerme.NewMultiEndpointClientWithSettings(ctx, c.database,
		spanner.ClientConfig{DisableNativeMetrics: true}, fc.Options, settings, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "spannerme query: %s\n", printable(bounded.Text(err.Error(), bounded.ServerText)))
		return exitFailed
	}
	defer client.Close()

	n, err := printRows(stdout, client.Single().Query(spannerme.NewMEContext(ctx, *group), spanner.Statement{SQL: *sql}))
	if err != nil {
		fmt.Fprintf(stderr, "spannerme query: %s\n", printable(bounded.Text(err.Error(), bounded.ServerText)))
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
