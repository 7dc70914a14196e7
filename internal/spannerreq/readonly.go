package spannerreq

import (
	"fmt"
	"sync"
	"sync/atomic"

	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Directed reads (https://cloud.google.com/spanner/docs/directed-reads): which replica serves
// a read-only request is Spanner's choice unless the request carries DirectedReadOptions.
// Spanner refuses directed reads in read-write transactions and partitioned DML (same page),
// so a policy is only ever added to requests that run read-only.

// MaxReplicaSelections is the most replica selections one DirectedReadOptions may list
// (includeReplicas or excludeReplicas): 10, Spanner's limit
// (https://cloud.google.com/spanner/docs/directed-reads, Limitations).
const MaxReplicaSelections = 10

// Full method names of the requests that may carry DirectedReadOptions, and of
// BeginTransaction, whose read-only transactions' IDs are remembered.
const (
	MethodExecuteSQL          = Service + "ExecuteSql"
	MethodExecuteStreamingSQL = Service + "ExecuteStreamingSql"
	MethodRead                = Service + "Read"
	MethodStreamingRead       = Service + "StreamingRead"
	MethodBeginTransaction    = Service + "BeginTransaction"
)

// CheckDirectedReadOptions returns what is wrong with o as a group's policy, or "".
func CheckDirectedReadOptions(o *spannerpb.DirectedReadOptions) string {
	var sels []*spannerpb.DirectedReadOptions_ReplicaSelection
	kind := "includeReplicas"
	switch r := o.GetReplicas().(type) {
	case nil:
		if o == nil {
			return "nil DirectedReadOptions (leave the group out for no policy)"
		}
		return "neither includeReplicas nor excludeReplicas is set"
	case *spannerpb.DirectedReadOptions_IncludeReplicas_:
		sels = r.IncludeReplicas.GetReplicaSelections()
	case *spannerpb.DirectedReadOptions_ExcludeReplicas_:
		sels, kind = r.ExcludeReplicas.GetReplicaSelections(), "excludeReplicas"
	}
	if len(sels) == 0 {
		return kind + " lists no replica selection"
	}
	if len(sels) > MaxReplicaSelections {
		return fmt.Sprintf("%s lists %d replica selections; Spanner allows at most %d", kind, len(sels), MaxReplicaSelections)
	}
	for i, s := range sels {
		if s == nil {
			return fmt.Sprintf("%s[%d] is nil", kind, i)
		}
		switch s.GetType() {
		case spannerpb.DirectedReadOptions_ReplicaSelection_TYPE_UNSPECIFIED,
			spannerpb.DirectedReadOptions_ReplicaSelection_READ_WRITE,
			spannerpb.DirectedReadOptions_ReplicaSelection_READ_ONLY:
		default:
			return fmt.Sprintf("%s[%d]: unknown replica type %d (want READ_ONLY or READ_WRITE)", kind, i, s.GetType())
		}
		if s.GetLocation() == "" && s.GetType() == spannerpb.DirectedReadOptions_ReplicaSelection_TYPE_UNSPECIFIED {
			return fmt.Sprintf("%s[%d] names neither a location nor a type", kind, i)
		}
	}
	return ""
}

// ReadOnlyTxns remembers the IDs of the read-only transactions begun through one
// GCPMultiEndpoint (a unary BeginTransaction with read-only options or query or read that
// begins one inline, and a streaming query or read of a group with a policy that does), so
// that the queries and reads that name one by ID get directed reads, and count as reads for
// health from call outcomes (NamesReadOnly): a request naming a transaction by ID says nothing of
// its mode, and a read-write one must never get them. Read-only transactions have no end Spanner is told of,
// so the oldest IDs are forgotten past maxReadOnlyTxns: a request naming a forgotten (or never
// seen) transaction gets no policy, which Spanner always accepts. An ID is remembered with
// its session: Spanner documents a transaction ID as opaque, unique only within its session
// as far as a client may know, so the same bytes in another session (of another client or
// database sharing this GCPMultiEndpoint) never count. Its methods judge whether a request
// runs read-only and add a group's policy to it (WithDirectedReads), and learn the IDs from
// replies (NoteBegin). Safe for concurrent use.
type ReadOnlyTxns struct {
	some atomic.Bool // an ID was remembered: until then no lookup takes the lock
	mu   sync.Mutex  // guards ids, ring and next
	ids  map[string]struct{}
	ring []string // the IDs in ids, oldest at next once full
	next int
}

// maxReadOnlyTxns bounds the remembered read-only transaction IDs (about 100 bytes each).
const maxReadOnlyTxns = 8192

// txnKey is the key of transaction id of session.
func txnKey(session string, id []byte) string { return session + "\x00" + string(id) }

// Add remembers id of session, the ID of a read-only transaction that began in it; an empty id is ignored.
func (t *ReadOnlyTxns) Add(session string, id []byte) {
	if len(id) == 0 {
		return
	}
	s := txnKey(session, id)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.ids[s]; ok {
		return
	}
	if t.ids == nil {
		t.ids = make(map[string]struct{})
	}
	if len(t.ring) < maxReadOnlyTxns {
		t.ring = append(t.ring, s)
	} else {
		delete(t.ids, t.ring[t.next])
		t.ring[t.next] = s
		t.next = (t.next + 1) % maxReadOnlyTxns
	}
	t.ids[s] = struct{}{}
	t.some.Store(true)
}

// has reports whether id of session is a remembered read-only transaction's.
func (t *ReadOnlyTxns) has(session string, id []byte) bool {
	k := txnKey(session, id)
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.ids[k]
	return ok
}

// NamesReadOnly reports whether req, a unary query (ExecuteSql), names by ID a remembered
// read-only transaction of its session. It allocates only once some ID is remembered.
func (t *ReadOnlyTxns) NamesReadOnly(req any) bool {
	r, ok := req.(*spannerpb.ExecuteSqlRequest)
	if !ok || !t.some.Load() {
		return false
	}
	id := r.GetTransaction().GetId()
	return id != nil && t.has(r.GetSession(), id)
}

// readOnlySelector reports whether a request with transaction selector sel runs in a
// read-only transaction: single-use read-only (or none: Spanner's default for queries and
// reads is a temporary read-only transaction, spanner.proto ExecuteSqlRequest.transaction),
// one it begins read-only, or one named by the ID of a remembered read-only transaction.
func (t *ReadOnlyTxns) readOnlySelector(session string, sel *spannerpb.TransactionSelector) bool {
	if id := sel.GetId(); id != nil {
		return t.has(session, id)
	}
	return ReadOnly(sel)
}

// WithDirectedReads returns req with dro added when req is a query or read (ExecuteSql,
// ExecuteStreamingSql, Read, StreamingRead) without DirectedReadOptions of its own that runs
// read-only (readOnlySelector); otherwise req itself. The caller's message is never
// modified (the Spanner client reuses it, on retries among others): the result is a shallow
// copy sharing every other field with it, which gRPC only reads.
func (t *ReadOnlyTxns) WithDirectedReads(req any, dro *spannerpb.DirectedReadOptions) any {
	switch r := req.(type) {
	case *spannerpb.ExecuteSqlRequest:
		if r == nil || r.DirectedReadOptions != nil || !t.readOnlySelector(r.Session, r.Transaction) {
			return req
		}
		c := shallowCopy(r)
		c.DirectedReadOptions = dro
		return c
	case *spannerpb.ReadRequest:
		if r == nil || r.DirectedReadOptions != nil || !t.readOnlySelector(r.Session, r.Transaction) {
			return req
		}
		c := shallowCopy(r)
		c.DirectedReadOptions = dro
		return c
	}
	return req
}

// shallowCopy returns a new message of m's type whose fields (unknown ones included) are
// m's: message, list and map fields share m's memory.
func shallowCopy[M proto.Message](m M) M {
	src := m.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	if u := src.GetUnknown(); len(u) > 0 {
		dst.SetUnknown(u)
	}
	return dst.Interface().(M)
}

// BeginsReadOnly reports whether req (a query or read) begins a read-only transaction inline,
// whose ID its first response carries, and req's session.
func BeginsReadOnly(req any) (session string, ok bool) {
	switch r := req.(type) {
	case *spannerpb.ExecuteSqlRequest:
		return r.GetSession(), r.GetTransaction().GetBegin().GetReadOnly() != nil
	case *spannerpb.ReadRequest:
		return r.GetSession(), r.GetTransaction().GetBegin().GetReadOnly() != nil
	}
	return "", false
}

// NoteBegin remembers the ID of the read-only transaction a successful unary call
// began: a BeginTransaction with read-only options, or a query or read that begins one
// inline. It is called after every successful unary call.
func (t *ReadOnlyTxns) NoteBegin(method string, req, reply any) {
	switch method {
	case MethodBeginTransaction:
		if r, ok := req.(*spannerpb.BeginTransactionRequest); ok && r.GetOptions().GetReadOnly() != nil {
			if tx, ok := reply.(*spannerpb.Transaction); ok {
				t.Add(r.GetSession(), tx.GetId())
			}
		}
	case MethodExecuteSQL, MethodRead:
		if session, ok := BeginsReadOnly(req); ok {
			if rs, ok := reply.(*spannerpb.ResultSet); ok {
				t.Add(session, rs.GetMetadata().GetTransaction().GetId())
			}
		}
	}
}

// directedStream is the stream of a streaming query or read (ExecuteStreamingSql,
// StreamingRead) of a group with a policy: its request gets the policy (WithDirectedReads),
// and the ID of a read-only transaction it begins inline is remembered from its first
// response. gRPC allows SendMsg and RecvMsg to run on two goroutines at once.
type directedStream struct {
	grpc.ClientStream
	txns *ReadOnlyTxns
	dro  *spannerpb.DirectedReadOptions
	// learn holds the session of a request that begins a read-only transaction, until
	// RecvMsg has read the transaction's ID from the first response; nil otherwise.
	learn atomic.Pointer[string]
}

// SendMsg sends m with the group's policy added when it applies.
func (s *directedStream) SendMsg(m any) error {
	if session, ok := BeginsReadOnly(m); ok {
		s.learn.Store(&session)
	}
	return s.ClientStream.SendMsg(s.txns.WithDirectedReads(m, s.dro))
}

// RecvMsg receives m and, for the first response of a stream that begins a read-only
// transaction, remembers the transaction's ID.
func (s *directedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		return err
	}
	if session := s.learn.Swap(nil); session != nil {
		if prs, ok := m.(*spannerpb.PartialResultSet); ok {
			s.txns.Add(*session, prs.GetMetadata().GetTransaction().GetId())
		}
	}
	return err
}

// WithDirectedStream returns cs, the stream of a call to method, with the policy dro added
// to its requests as WithDirectedReads adds it, and the ID of a read-only transaction its
// request begins inline remembered in t from its first response; cs itself when method is
// not a streaming query or read (ExecuteStreamingSql, StreamingRead) or dro is nil.
func (t *ReadOnlyTxns) WithDirectedStream(cs grpc.ClientStream, method string, dro *spannerpb.DirectedReadOptions) grpc.ClientStream {
	if dro == nil || (method != MethodExecuteStreamingSQL && method != MethodStreamingRead) {
		return cs
	}
	return &directedStream{ClientStream: cs, txns: t, dro: dro}
}
