package spannerme

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"github.com/GoogleCloudPlatform/grpc-gcp-go/grpcgcp/multiendpoint"
	"google.golang.org/protobuf/proto"

	"github.com/spannerme/spanner-multiendpoint/internal/spannerreq"
	"github.com/spannerme/spanner-multiendpoint/spannerme/spannermetest"
)

// includeReplicas returns a policy that includes the given locations' replicas of type typ.
func includeReplicas(typ spannerpb.DirectedReadOptions_ReplicaSelection_Type, locations ...string) *spannerpb.DirectedReadOptions {
	inc := &spannerpb.DirectedReadOptions_IncludeReplicas{}
	for _, l := range locations {
		inc.ReplicaSelections = append(inc.ReplicaSelections, &spannerpb.DirectedReadOptions_ReplicaSelection{Location: l, Type: typ})
	}
	return &spannerpb.DirectedReadOptions{Replicas: &spannerpb.DirectedReadOptions_IncludeReplicas_{IncludeReplicas: inc}}
}

var westReadOnly = includeReplicas(spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY, "us-west2")

// Each invalid policy is refused with a *ConfigError naming its group; valid ones (up to
// MaxReplicaSelections selections, include or exclude) are accepted and copied.
func TestSettingsDirectedReadsValidation(t *testing.T) {
	eleven := make([]string, MaxReplicaSelections+1)
	for i := range eleven {
		eleven[i] = fmt.Sprintf("region-%d", i)
	}
	exclude := func(sels ...*spannerpb.DirectedReadOptions_ReplicaSelection) *spannerpb.DirectedReadOptions {
		return &spannerpb.DirectedReadOptions{Replicas: &spannerpb.DirectedReadOptions_ExcludeReplicas_{
			ExcludeReplicas: &spannerpb.DirectedReadOptions_ExcludeReplicas{ReplicaSelections: sels}}}
	}
	for _, tc := range []struct {
		name    string
		policy  *spannerpb.DirectedReadOptions
		problem string // "" for valid
	}{
		{"include", westReadOnly, ""},
		{"ten selections", includeReplicas(0, eleven[:10]...), ""},
		{"exclude a type", exclude(&spannerpb.DirectedReadOptions_ReplicaSelection{Type: spannerpb.DirectedReadOptions_ReplicaSelection_READ_WRITE}), ""},
		{"nil", nil, "nil DirectedReadOptions"},
		{"neither include nor exclude", &spannerpb.DirectedReadOptions{}, "neither includeReplicas nor excludeReplicas"},
		{"no selection", includeReplicas(0), "includeReplicas lists no replica selection"},
		{"eleven selections", includeReplicas(0, eleven...), "includeReplicas lists 11 replica selections; Spanner allows at most 10"},
		{"unknown type", includeReplicas(7, "us-west2"), "includeReplicas[0]: unknown replica type 7"},
		{"empty selection", exclude(&spannerpb.DirectedReadOptions_ReplicaSelection{}), "excludeReplicas[0] names neither a location nor a type"},
		{"nil selection", exclude(nil), "excludeReplicas[0] is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dr := map[string]*spannerpb.DirectedReadOptions{"west": tc.policy}
			got, err := parseDirectedReads(dr)
			if tc.problem == "" {
				if err != nil || !proto.Equal(got["west"], tc.policy) || got["west"] == tc.policy {
					t.Fatalf("parseDirectedReads = %v, %v; want a copy of the policy", got, err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || ce.Group != "west" || !strings.Contains(err.Error(), tc.problem) {
				t.Fatalf("error %v, want a *ConfigError of group west saying %q", err, tc.problem)
			}
			_, err = NewGCPMultiEndpointWithSettings(options("west", map[string]*multiendpoint.MultiEndpointOptions{"west": group(0, 0, "127.0.0.1:1")}),
				Settings{DirectedReads: dr}, insecureDial)
			if !errors.As(err, &ce) || ce.Group != "west" {
				t.Fatalf("NewGCPMultiEndpointWithSettings: %v, want the same *ConfigError", err)
			}
		})
	}
}

// directedBackend is an in-memory Spanner behind two recording frontends: group "default"
// (no policy) goes through def, group "west" (policy westReadOnly) through west.
type directedBackend struct {
	def, west *spannermetest.Frontend
	gme       *GCPMultiEndpoint
	client    spannerpb.SpannerClient
	session   string
}

func startDirectedBackend(t *testing.T) *directedBackend {
	t.Helper()
	addr, db := startSeededSpannertest(t)
	b := &directedBackend{
		def:  spannermetest.NewFrontendTB(t, addr, spannermetest.WithRequestRecording(1000)),
		west: spannermetest.NewFrontendTB(t, addr, spannermetest.WithRequestRecording(1000)),
	}
	s := fastSettings(nil)
	s.DirectedReads = map[string]*spannerpb.DirectedReadOptions{"west": westReadOnly}
	b.gme = newGME(t, options("default", map[string]*multiendpoint.MultiEndpointOptions{
		"default": group(0, 0, b.def.Addr()),
		"west":    group(0, 0, b.west.Addr()),
	}), s)
	b.client = spannerpb.NewSpannerClient(b.gme)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := b.client.CreateSession(ctx, &spannerpb.CreateSessionRequest{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	b.session = sess.Name
	return b
}

// carried returns, for each ExecuteStreamingSql, ExecuteSql, Read and StreamingRead request
// f recorded since the last reset, its SQL (or table) and whether it had the west policy,
// own options ("own") or none ("none").
func carried(t *testing.T, f *spannermetest.Frontend) []string {
	t.Helper()
	var out []string
	for _, r := range f.Requests() {
		var what string
		var dro *spannerpb.DirectedReadOptions
		switch r.Method {
		case spannerreq.MethodExecuteSQL, spannerreq.MethodExecuteStreamingSQL:
			var m spannerpb.ExecuteSqlRequest
			if err := proto.Unmarshal(r.Message, &m); err != nil {
				t.Fatal(err)
			}
			what, dro = m.Sql, m.DirectedReadOptions
		case spannerreq.MethodRead, spannerreq.MethodStreamingRead:
			var m spannerpb.ReadRequest
			if err := proto.Unmarshal(r.Message, &m); err != nil {
				t.Fatal(err)
			}
			what, dro = "read "+m.Table, m.DirectedReadOptions
		default:
			continue
		}
		switch {
		case dro == nil:
			what += ": none"
		case proto.Equal(dro, westReadOnly):
			what += ": west"
		default:
			what += ": own"
		}
		out = append(out, what)
	}
	return out
}

// At the gRPC layer (the generated Spanner client over the GCPMultiEndpoint), the frontend of
// the "west" group receives the policy on read-only queries and reads, unary and streaming,
// single-use or in a read-only transaction (begun by BeginTransaction or by a query), and
// nothing on read-write queries, DML and requests with their own options; the "default"
// group, without a policy, forwards every request as sent.
func TestDirectedReadsReachTheFrontend(t *testing.T) {
	b := startDirectedBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	west := NewMEContext(ctx, "west")
	ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	rw := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadWrite_{ReadWrite: &spannerpb.TransactionOptions_ReadWrite{}}}
	singleUse := &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: ro}}
	idOf := func(id []byte) *spannerpb.TransactionSelector {
		return &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Id{Id: id}}
	}
	stream := func(ctx context.Context, sql string, ts *spannerpb.TransactionSelector, own *spannerpb.DirectedReadOptions) *spannerpb.ResultSetMetadata {
		t.Helper()
		s, err := b.client.ExecuteStreamingSql(ctx, &spannerpb.ExecuteSqlRequest{Session: b.session, Sql: sql, Transaction: ts, DirectedReadOptions: own})
		if err != nil {
			t.Fatal(err)
		}
		var md *spannerpb.ResultSetMetadata
		for {
			prs, err := s.Recv()
			if err == io.EOF {
				return md
			}
			if err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			if md == nil {
				md = prs.Metadata
			}
		}
	}
	unary := func(ctx context.Context, sql string, ts *spannerpb.TransactionSelector) {
		t.Helper()
		if _, err := b.client.ExecuteSql(ctx, &spannerpb.ExecuteSqlRequest{Session: b.session, Sql: sql, Transaction: ts, Seqno: 1}); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	stream(west, "SELECT 1", singleUse, nil)
	unary(west, "SELECT 2", singleUse)
	read, err := b.client.StreamingRead(west, &spannerpb.ReadRequest{Session: b.session, Transaction: singleUse, Table: "Accounts",
		Columns: []string{"AccountId"}, KeySet: &spannerpb.KeySet{All: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := read.Recv(); err != io.EOF; _, err = read.Recv() {
		if err != nil {
			t.Fatal(err)
		}
	}
	stream(west, "SELECT 3", singleUse, includeReplicas(spannerpb.DirectedReadOptions_ReplicaSelection_READ_WRITE, "us-east4"))
	roTx, err := b.client.BeginTransaction(west, &spannerpb.BeginTransactionRequest{Session: b.session, Options: ro})
	if err != nil {
		t.Fatal(err)
	}
	stream(west, "SELECT 4", idOf(roTx.Id), nil)
	rwTx, err := b.client.BeginTransaction(west, &spannerpb.BeginTransactionRequest{Session: b.session, Options: rw})
	if err != nil {
		t.Fatal(err)
	}
	stream(west, "SELECT 5", idOf(rwTx.Id), nil)
	unary(west, "UPDATE Accounts SET Balance = 0 WHERE AccountId = 'none'", idOf(rwTx.Id))
	if _, err := b.client.Rollback(west, &spannerpb.RollbackRequest{Session: b.session, TransactionId: rwTx.Id}); err != nil {
		t.Fatal(err)
	}
	md := stream(west, "SELECT 7", &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_Begin{Begin: ro}}, nil)
	if md.GetTransaction().GetId() == nil {
		t.Fatal("a query that begins a read-only transaction got no transaction ID")
	}
	stream(west, "SELECT 8", idOf(md.GetTransaction().GetId()), nil)
	stream(ctx, "SELECT 6", singleUse, nil)

	wantWest := []string{
		"SELECT 1: west",      // single-use, streaming
		"SELECT 2: west",      // single-use, unary
		"read Accounts: west", // single-use, streaming read
		"SELECT 3: own",       // its own options win
		"SELECT 4: west",      // in a read-only transaction (BeginTransaction)
		"SELECT 5: none",      // in a read-write transaction
		"UPDATE Accounts SET Balance = 0 WHERE AccountId = 'none': none", // DML
		"SELECT 7: west", // begins a read-only transaction
		"SELECT 8: west", // in the read-only transaction SELECT 7 began
	}
	if got := carried(t, b.west); fmt.Sprint(got) != fmt.Sprint(wantWest) {
		t.Errorf("west frontend received:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantWest, "\n"))
	}
	if got := carried(t, b.def); fmt.Sprint(got) != "[SELECT 6: none]" {
		t.Errorf("default frontend received %q, want the query without options", got)
	}
	if st := groupOf(b.gme, "west"); st.DirectedReads.String() != "include us-west2/READ_ONLY" {
		t.Errorf("west status policy %q", st.DirectedReads.String())
	}
	if st := groupOf(b.gme, "default"); st.DirectedReads != nil {
		t.Errorf("default status policy %+v, want none", st.DirectedReads)
	}
}

// The same request message, sent concurrently and repeatedly through the policy group (as
// the Spanner client resends a request on retry), is never modified: run with -race, any
// write to it would be reported; and every copy reaches the frontend with the policy.
func TestDirectedReadsDoNotTouchTheCallersMessage(t *testing.T) {
	b := startDirectedBackend(t)
	ctx, cancel := context.WithTimeout(NewMEContext(context.Background(), "west"), 30*time.Second)
	defer cancel()
	ro := &spannerpb.TransactionOptions{Mode: &spannerpb.TransactionOptions_ReadOnly_{ReadOnly: &spannerpb.TransactionOptions_ReadOnly{}}}
	req := &spannerpb.ExecuteSqlRequest{Session: b.session, Sql: "SELECT 1",
		Transaction: &spannerpb.TransactionSelector{Selector: &spannerpb.TransactionSelector_SingleUse{SingleUse: ro}}}
	before := proto.Clone(req)
	const workers, calls = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*calls)
	for range workers {
		wg.Go(func() {
			for range calls {
				if req.DirectedReadOptions != nil { // a read racing any write to the field
					errs <- errors.New("the caller's message got DirectedReadOptions")
				}
				if _, err := b.client.ExecuteSql(ctx, req); err != nil {
					errs <- err
				}
				s, err := b.client.ExecuteStreamingSql(ctx, req)
				if err == nil {
					for _, err = s.Recv(); err == nil; _, err = s.Recv() {
					}
				}
				if err != io.EOF {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !proto.Equal(req, before) {
		t.Errorf("the caller's message changed: %v", req)
	}
	got := carried(t, b.west)
	if len(got) != 2*workers*calls {
		t.Fatalf("%d requests recorded, want %d", len(got), 2*workers*calls)
	}
	for _, g := range got {
		if g != "SELECT 1: west" {
			t.Fatalf("a request reached the frontend as %q, want with the policy", g)
		}
	}
}

// A group's directedReads in the configuration file becomes its Settings.DirectedReads entry;
// each mistake is an error naming the line and the field, under the group.
func TestParseConfigDirectedReads(t *testing.T) {
	const head = "default: d\nmultiEndpoints:\n  d:\n    endpoints: [a:1]\n  west:\n    endpoints: [b:2]\n    directedReads:\n"
	c, err := ParseConfig([]byte(head + "      includeReplicas: [{location: us-west2, type: READ_ONLY}, {location: us-east4}]\n      autoFailoverDisabled: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := includeReplicas(0, "us-west2", "us-east4")
	want.GetIncludeReplicas().ReplicaSelections[0].Type = spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY
	want.GetIncludeReplicas().AutoFailoverDisabled = true
	if len(c.Settings.DirectedReads) != 1 || !proto.Equal(c.Settings.DirectedReads["west"], want) {
		t.Errorf("DirectedReads %v, want west: %v", c.Settings.DirectedReads, want)
	}
	c, err = ParseConfig([]byte(head + "      excludeReplicas:\n        - type: READ_WRITE\n"))
	if err != nil {
		t.Fatal(err)
	}
	wantEx := &spannerpb.DirectedReadOptions{Replicas: &spannerpb.DirectedReadOptions_ExcludeReplicas_{ExcludeReplicas: &spannerpb.DirectedReadOptions_ExcludeReplicas{
		ReplicaSelections: []*spannerpb.DirectedReadOptions_ReplicaSelection{{Type: spannerpb.DirectedReadOptions_ReplicaSelection_READ_WRITE}}}}}
	if !proto.Equal(c.Settings.DirectedReads["west"], wantEx) {
		t.Errorf("DirectedReads %v, want west: %v", c.Settings.DirectedReads, wantEx)
	}
	var eleven []string
	for i := range MaxReplicaSelections + 1 {
		eleven = append(eleven, fmt.Sprintf("{location: r%d}", i))
	}
	const dr = "multiEndpoints.west.directedReads"
	for _, tc := range []struct {
		name, in    string
		line        int
		field, want string
	}{
		{"both", "      includeReplicas: [{location: x}]\n      excludeReplicas: [{location: y}]\n", 8, dr, `give includeReplicas or excludeReplicas, not both`},
		{"neither", "      autoFailoverDisabled: true\n", 8, dr, `group "west": neither includeReplicas nor excludeReplicas is set`},
		{"failover with exclude", "      excludeReplicas: [{location: y}]\n      autoFailoverDisabled: false\n", 9, dr + ".autoFailoverDisabled", "applies only to includeReplicas"},
		{"bad type", "      includeReplicas: [{location: x, type: read_only}]\n", 8, dr + ".includeReplicas[0].type", `want READ_ONLY or READ_WRITE, got "read_only"`},
		{"unknown selection field", "      includeReplicas: [{region: x}]\n", 8, dr + ".includeReplicas[0].region", "unknown field"},
		{"empty list", "      includeReplicas: []\n", 8, dr, `group "west": includeReplicas lists no replica selection`},
		{"empty selection", "      excludeReplicas: [{}]\n", 8, dr, `group "west": excludeReplicas[0] names neither a location nor a type`},
		{"too many", "      includeReplicas: [" + strings.Join(eleven, ", ") + "]\n", 8, dr, "lists 11 replica selections; Spanner allows at most 10"},
		{"not a list", "      includeReplicas: us-west2\n", 8, dr + ".includeReplicas", "want a list of replica selections"},
		{"unknown field", "      include: [{location: x}]\n", 8, dr + ".include", "did you mean includeReplicas?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(head + tc.in))
			var fe *ConfigFileError
			if !errors.As(err, &fe) || c != nil || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("ParseConfig = %v, %v; want a *ConfigFileError", c, err)
			}
			if fe.Line != tc.line || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (line %d, field %q); want line %d, field %q, text %q", err, fe.Line, fe.Field, tc.line, tc.field, tc.want)
			}
		})
	}
}

// A watched file's edit of a group's directedReads takes effect at once (no restart
// needed); an invalid one keeps the policy in force; removing it leaves the group without one.
func TestWatchAppliesDirectedReads(t *testing.T) {
	f := newWatchFixture(t, filepath.Join(t.TempDir(), "spannerme.yaml"))
	policy := func() string { return groupOf(f.gme, "g").DirectedReads.String() }
	if p := policy(); p != "" {
		t.Fatalf("policy %q before any directedReads", p)
	}
	with := watchConfigYAML("    directedReads: {includeReplicas: [{location: us-west2, type: READ_ONLY}]}\n", f.eps[0].Addr())
	writeFile(t, f.path, with)
	if s := f.waitApplied(t, with); len(s.RestartNeeded) != 0 {
		t.Errorf("RestartNeeded %v, want none", s.RestartNeeded)
	}
	if p := policy(); p != "include us-west2/READ_ONLY" {
		t.Errorf("policy %q after the edit", p)
	}
	bad := watchConfigYAML("    directedReads: {includeReplicas: []}\n", f.eps[0].Addr())
	writeFile(t, f.path, bad)
	f.waitStatus(t, "the invalid edit rejected", func(s ConfigStatus) bool { return s.LastError != nil })
	if p := policy(); p != "include us-west2/READ_ONLY" {
		t.Errorf("policy %q after an invalid edit, want the previous one", p)
	}
	without := watchConfigYAML("", f.eps[0].Addr())
	writeFile(t, f.path, without)
	f.waitApplied(t, without)
	if p := policy(); p != "" {
		t.Errorf("policy %q after directedReads was removed, want none", p)
	}
}
