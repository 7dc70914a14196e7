package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	sppb "cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// streamingSpanner is the least of a Spanner frontend that query needs: it creates sessions
// and answers every query with two STRING columns, rows rows (forever when rows < 0) in
// PartialResultSets of 100 rows, each with a resume token as Spanner sends them, then fails
// with failWith, if set.
type streamingSpanner struct {
	sppb.UnimplementedSpannerServer
	rows     int
	failWith error
}

func (streamingSpanner) CreateSession(_ context.Context, req *sppb.CreateSessionRequest) (*sppb.Session, error) {
	return &sppb.Session{Name: req.Database + "/sessions/s", Multiplexed: req.GetSession().GetMultiplexed()}, nil
}

func (streamingSpanner) BatchCreateSessions(_ context.Context, req *sppb.BatchCreateSessionsRequest) (*sppb.BatchCreateSessionsResponse, error) {
	resp := &sppb.BatchCreateSessionsResponse{}
	for i := range req.SessionCount {
		resp.Session = append(resp.Session, &sppb.Session{Name: fmt.Sprintf("%s/sessions/s%d", req.Database, i)})
	}
	return resp, nil
}

func (streamingSpanner) GetSession(_ context.Context, req *sppb.GetSessionRequest) (*sppb.Session, error) {
	return &sppb.Session{Name: req.Name}, nil
}

func (streamingSpanner) DeleteSession(context.Context, *sppb.DeleteSessionRequest) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (s streamingSpanner) ExecuteStreamingSql(_ *sppb.ExecuteSqlRequest, stream sppb.Spanner_ExecuteStreamingSqlServer) error {
	const batch = 100
	meta := &sppb.ResultSetMetadata{RowType: &sppb.StructType{Fields: []*sppb.StructType_Field{
		{Name: "Id", Type: &sppb.Type{Code: sppb.TypeCode_STRING}},
		{Name: "Text", Type: &sppb.Type{Code: sppb.TypeCode_STRING}}}}}
	for sent := 0; s.rows < 0 || sent < s.rows; {
		prs := &sppb.PartialResultSet{Metadata: meta, ResumeToken: fmt.Appendf(nil, "%d", sent)}
		meta = nil
		for range batch {
			if s.rows >= 0 && sent == s.rows {
				break
			}
			prs.Values = append(prs.Values, structpb.NewStringValue(fmt.Sprint(sent)), structpb.NewStringValue("row text"))
			sent++
		}
		if err := stream.Send(prs); err != nil {
			return err
		}
	}
	if s.failWith != nil {
		return s.failWith
	}
	if meta != nil { // no row at all: the metadata alone
		return stream.Send(&sppb.PartialResultSet{Metadata: meta})
	}
	return nil
}

// startStreamingSpanner serves s on 127.0.0.1:0 and returns a configuration file with one
// group of that address.
func startStreamingSpanner(t *testing.T, s streamingSpanner) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	sppb.RegisterSpannerServer(srv, s)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return writeConfig(t, fmt.Sprintf("default: d\nmultiEndpoints: {d: {endpoints: ['%s']}}\n", lis.Addr()))
}

// rowLine is a row of the fake's table: its number and its text.
var rowLine = regexp.MustCompile(`^\d+ +row text$`)

// query against a frontend that streams rows forever: the rows are on stdout while the query
// runs (the first within 5s of the start, long before --timeout ends it), the first
// --max-rows (1000) of them and no more, then the count of the rows left out and the error
// that ended it; the process's peak RSS stays under 150 MB (see the bound). The issue's
// --timeout 10s is 6s here.
func TestQueryStreamsRowsAndCapsThem(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the peak RSS is read from Linux's rusage")
	}
	cfg := startStreamingSpanner(t, streamingSpanner{rows: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "query", "--config", cfg, "--database", "projects/p/instances/i/databases/d",
		"--plaintext", "--no-auth", "--timeout", "6s", "--sql", "SELECT Id, Text FROM Endless")
	cmd.Env = append(os.Environ(), "SPANNER_EMULATOR_HOST=")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	var firstRow time.Duration
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if firstRow == 0 && rowLine.MatchString(sc.Text()) {
			firstRow = time.Since(start)
		}
		lines = append(lines, sc.Text())
	}
	werr := cmd.Wait()
	took := time.Since(start)
	t.Logf("stdout: %d lines, first row after %v, exit after %v (%v); stderr:\n%s", len(lines), firstRow, took, werr, errOut.String())
	if firstRow == 0 || firstRow > 5*time.Second || took-firstRow < time.Second {
		t.Errorf("the first row came after %v and the exit after %v; want the row within 5s, as the rows come, not at the end", firstRow, took)
	}
	rows := 0
	for _, l := range lines {
		if rowLine.MatchString(l) {
			rows++
		}
	}
	if rows != defaultMaxRows || len(lines) < 2 || !strings.HasPrefix(lines[0], "Id") {
		t.Errorf("%d rows under a header %q, want %d", rows, lines[0], defaultMaxRows)
	}
	tail := strings.Join(lines[max(len(lines)-3, 0):], "\n")
	if m := regexp.MustCompile(`\((\d+) more rows left out by --max-rows 1000\)`).FindStringSubmatch(tail); m == nil || len(m[1]) < 4 {
		t.Errorf("the output ends %q; want the count of the rows left out (thousands)", tail)
	}
	if cmd.ProcessState.ExitCode() != exitFailed || !strings.Contains(errOut.String(), "DeadlineExceeded") {
		t.Errorf("exit %d, stderr %q; want 1 and the deadline", cmd.ProcessState.ExitCode(), errOut.String())
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		t.Fatal("no rusage")
	}
	peak := ru.Maxrss * 1024 // kilobytes on Linux
	t.Logf("peak RSS %.1f MB", float64(peak)/(1<<20))
	// The bound has room for a loaded machine: 39-65 MB on a quiet one (and 43.6 MB by hand
	// with --timeout 10s), 100.9 MB once in CI with the race-detected suites beside it, where
	// the query's reader lags its stream and gRPC's window and the garbage collector hold more.
	// A query that kept its rows grew to 674 MB in 5s: any bound under that catches it.
	if peak >= 150<<20 {
		t.Errorf("peak RSS %.1f MB, want under 150 MB (the rows are kept, not streamed)", float64(peak)/(1<<20))
	}
}

// A query that fails after 100 rows prints the 100 rows, then says so and prints the error.
// stdout and stderr are one pipe here, so their order is the order written.
func TestQueryPrintsTheRowsBeforeAnError(t *testing.T) {
	cfg := startStreamingSpanner(t, streamingSpanner{rows: 100, failWith: status.Error(codes.FailedPrecondition, "the table moved")})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "query", "--config", cfg, "--database", "projects/p/instances/i/databases/d",
		"--plaintext", "--no-auth", "--sql", "SELECT Id, Text FROM T")
	cmd.Env = append(os.Environ(), "SPANNER_EMULATOR_HOST=")
	var both bytes.Buffer
	cmd.Stdout, cmd.Stderr = &both, &both
	err := cmd.Run()
	out := both.String()
	t.Logf("exit %v; output:\n%s", err, out)
	if cmd.ProcessState.ExitCode() != exitFailed {
		t.Errorf("exit %d, want 1", cmd.ProcessState.ExitCode())
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	rows, lastRow, errLine := 0, -1, -1
	for i, l := range lines {
		switch {
		case rowLine.MatchString(l):
			if f := strings.Fields(l)[0]; f != fmt.Sprint(rows) {
				t.Errorf("row %d is numbered %s", rows, f)
			}
			rows++
			lastRow = i
		case strings.Contains(l, "the table moved") && errLine < 0:
			errLine = i
		}
	}
	if rows != 100 {
		t.Errorf("%d rows printed, want the 100 that came before the error", rows)
	}
	if errLine < 0 || errLine < lastRow || !strings.Contains(out, "(100 rows before the error)") {
		t.Errorf("the error (line %d) does not follow the rows (last at line %d) with their count", errLine, lastRow)
	}
}
