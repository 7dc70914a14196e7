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
	"time"
	"unicode/utf8"

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
	maxRows := fs.Int("max-rows", defaultMaxRows, "the most rows printed; the rows after them are counted, not printed, until the query ends")
	connectTimeout := fs.Duration("connect-timeout", 3*time.Second,
		"how long the group may take to have an available endpoint; past it the query stops and says why each endpoint is not available")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: spannerme query --config FILE --database D [--group NAME] --sql \"SELECT 1\" [flags]\n\n"+
			"Runs one query through a group, as an application would, and prints the rows as they come\n"+
			"(the first --max-rows of them; the columns' widths are those of the first rows) and the endpoint\n"+
			"that served them. Only the group's endpoints are dialed. When no endpoint of the group is\n"+
			"available within --connect-timeout, the query stops and prints why, endpoint by endpoint.\n"+
			"Exit status: 0 on success, 1 when the query fails, 2 on a bad configuration file or bad flags.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fc, err := c.parse(ctx, fs, args, stderr)
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
	if *maxRows <= 0 {
		fmt.Fprintln(stderr, "spannerme query: --max-rows must be positive")
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
	rows, err := printRows(stdout, client.Single().Query(spannerme.NewMEContext(qctx, *group), spanner.Statement{SQL: *sql}), *maxRows, widthWait)
	stopQuery(nil)
	<-watched
	if rows.left > 0 {
		fmt.Fprintf(stdout, "(%d more rows left out by --max-rows %d)\n", rows.left, *maxRows)
	}
	if err != nil {
		if rows.total() > 0 {
			fmt.Fprintf(stdout, "(%d rows before the error)\n", rows.total())
		}
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
	fmt.Fprintf(stdout, "(%d rows; served by endpoint %s of group %s, whose current endpoint is %s)\n", rows.total(),
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

// defaultMaxRows is --max-rows's default: what a terminal's scrollback holds (xterm keeps
// 1024 lines).
const defaultMaxRows = 1000

// The columns' widths are those of the header and the first widthRows rows, or of the rows
// that came within widthWait of the first one, whichever comes first; the rows after them are
// printed as they come, a cell wider than its column pushing the rest of its row right.
const (
	widthRows = 50
	widthWait = 250 * time.Millisecond
)

// rowCount counts a query's rows: printed, and left out by --max-rows.
type rowCount struct{ printed, left int }

func (c rowCount) total() int { return c.printed + c.left }

// printRows prints it's rows as a table with a header, as they come (widthRows, widthWait),
// at most maxRows of them: the rest are counted, not kept. It reads until the query ends, and
// prints the rows that came before an error before returning it. It stops the iterator.
func printRows(w io.Writer, it *spanner.RowIterator, maxRows int, wait time.Duration) (rowCount, error) {
	type next struct {
		header, cells []string // header: the first row's only
		err           error
	}
	rows := make(chan next, 64)
	go func() { // the iterator's goroutine: Next blocks until a row comes
		defer close(rows)
		defer it.Stop()
		for first := true; ; first = false {
			row, err := it.Next()
			if err == iterator.Done {
				return
			}
			if err != nil {
				rows <- next{err: err}
				return
			}
			var r next
			if first {
				for _, c := range row.ColumnNames() {
					r.header = append(r.header, printable(c))
				}
			}
			r.cells = make([]string, row.Size())
			for i := range r.cells {
				var v spanner.GenericColumnValue
				if err := row.Column(i, &v); err != nil {
					rows <- next{err: err}
					return
				}
				r.cells[i] = printable(formatValue(v.Value))
			}
			rows <- r
		}
	}()

	t := &streamTable{w: w}
	var n rowCount
	var err error
	var settle <-chan time.Time
	for {
		select {
		case r, ok := <-rows:
			switch {
			case !ok:
				return n, errors.Join(err, t.flush())
			case r.err != nil:
				err = r.err // the channel closes next
			case n.printed >= maxRows:
				n.left++
			default:
				if r.header != nil {
					t.header = r.header
					timer := time.NewTimer(wait)
					defer timer.Stop()
					settle = timer.C
				}
				n.printed++
				if werr := t.add(r.cells); werr != nil && err == nil {
					err = werr
				}
			}
		case <-settle:
			settle = nil
			if werr := t.flush(); werr != nil && err == nil {
				err = werr
			}
		}
	}
}

// streamTable prints a table whose columns' widths are set by its first rows: it keeps up to
// widthRows rows until flush, then prints each row as it is added.
type streamTable struct {
	w       io.Writer
	header  []string
	kept    [][]string
	widths  []int // set by flush
	flushed bool
}

// add prints cells, or keeps them until the widths are set.
func (t *streamTable) add(cells []string) error {
	if t.flushed {
		return t.line(cells)
	}
	t.kept = append(t.kept, cells)
	if len(t.kept) >= widthRows {
		return t.flush()
	}
	return nil
}

// flush sets the widths from the header and the rows kept, and prints them; later, nothing.
func (t *streamTable) flush() error {
	if t.flushed || t.header == nil {
		return nil
	}
	t.flushed = true
	for _, r := range append([][]string{t.header}, t.kept...) {
		for i, c := range r {
			if i == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
		}
	}
	if err := t.line(t.header); err != nil {
		return err
	}
	for _, r := range t.kept {
		if err := t.line(r); err != nil {
			return err
		}
	}
	t.kept = nil
	return nil
}

// line prints one row, each cell but the last padded to its column's width and 2 spaces.
func (t *streamTable) line(cells []string) error {
	var b strings.Builder
	for i, c := range cells {
		b.WriteString(c)
		if i < len(cells)-1 {
			pad := 2
			if i < len(t.widths) {
				pad += max(t.widths[i]-utf8.RuneCountInString(c), 0)
			}
			b.WriteString(strings.Repeat(" ", pad))
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(t.w, b.String())
	return err
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
