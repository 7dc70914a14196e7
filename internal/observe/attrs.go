// Package observe turns what a GCPMultiEndpoint sees into log lines (one per transition of an
// endpoint, never one per call), OpenTelemetry metrics (Metrics, whose instruments Docs
// lists) and the history of each group's switches (Observer). spannerme exports the
// attribute keys under the same names.
package observe

// Attribute keys of the metrics and of the trace attributes. spannerme exports each under the
// same name, documented there, as its public API (a test there holds the values equal).
const (
	// AttrMultiEndpoint is the group (MultiEndpoint) name, on metrics and on the call's span.
	AttrMultiEndpoint = "spannerme.multiendpoint"
	// AttrEndpoint is the endpoint, on metrics and on the call's span.
	AttrEndpoint = "spannerme.endpoint"
	// AttrEndpointName is the endpoint's EndpointOptions.Name, next to AttrEndpoint wherever
	// that is, but only when the endpoint has a name: an endpoint without one has no such
	// attribute. It adds no series (a name is 1:1 with its endpoint), except that a reload
	// that renames an endpoint starts its series under the new name.
	AttrEndpointName = "spannerme.endpoint.name"
	// AttrEndpointPriority is the endpoint's position in its group's list (0 is the top
	// priority), an integer, on the current-endpoint gauge only: "a group is off its first
	// endpoint" is current_endpoint == 1 with a priority other than 0. A reconfiguration that
	// reorders a group's endpoints starts their series under the new positions.
	AttrEndpointPriority = "spannerme.endpoint.priority"
	// AttrEndpointState is an EndpointState in lower case: available, recovering or
	// unavailable.
	AttrEndpointState = "spannerme.endpoint.state"
	// AttrSwitchReason is a SwitchReason: fallback, recovery or reconfiguration.
	AttrSwitchReason = "spannerme.switch.reason"
	// AttrVerdict is an endpoint's verdict in a group, on the verdict gauge: why the group may
	// or may not use it (EndpointStatus.Verdict), as a short key: usable, not_connected,
	// ejected, degraded, degraded_last_resort or ejected_everywhere.
	AttrVerdict = "spannerme.endpoint.verdict"
	// AttrEjectionReason says why outcome-based health ejected an endpoint: an EjectionReason
	// in its String form (EjectionReason lists the values).
	AttrEjectionReason = "spannerme.ejection.reason"
	// AttrHedgeOutcome is what became of hedges (HedgingStatus): sent, won, lost or
	// refused (by the budget).
	AttrHedgeOutcome = "spannerme.hedge.outcome"
	// AttrRerouteReason says why a call went elsewhere than its group's current endpoint:
	// retry_elsewhere (its request's previous attempt failed there), overload_cooldown (the
	// endpoint is cooling down after RESOURCE_EXHAUSTED), or refused_by_budget (a retry the
	// retry budget kept where the group sends it).
	AttrRerouteReason = "spannerme.reroute.reason"
	// AttrResendFrom is the endpoint a stream failed on before it was sent again at once to
	// another endpoint (AttrEndpoint) of its group (docs/health.md, "Retry elsewhere").
	AttrResendFrom = "spannerme.resend.from"
	// AttrGRPCStatusCode is the call's gRPC status code as an integer (0 is OK), as in the
	// OpenTelemetry semantic conventions for gRPC.
	AttrGRPCStatusCode = "rpc.grpc.status_code"
)
