// Package spannerreq holds what spannerme knows of the Spanner API's requests, apart from
// routing: the health class of a call (Class), which requests run read-only and may carry
// a group's directed read policy (ReadOnlyTxns), and the Spanner client's request-ID header
// and the errors its interceptor returns (FromCallOptions, WithHeader, WithError). Its types
// are the Spanner API's (spannerpb) and gRPC's; it knows nothing of groups or endpoints.
package spannerreq
