// Package verdict decides, for one group, which of its endpoints the group may use: one
// verdict per endpoint, from one snapshot of every endpoint's inputs (its pool's
// connectivity, its ejection by the health detector, the brownout rule's finding, its
// overload cooldown), with one
// reason. It is the only place where these signals meet: the signals are computed apart, on
// their own triggers, and each change of any of them asks for a new verdict of every group
// that lists the endpoint.
//
// The rules, for a group:
//
//  1. An endpoint is usable when its pool is connected, it is not ejected, it is not cooling
//     down after an overload (RESOURCE_EXHAUSTED), and the brownout rule does not find it
//     degraded (far slower than a usable fallback of the group).
//  2. When the group has a usable endpoint, the available endpoints are the usable ones.
//  3. When it has none, a connected endpoint that is not ejected is available although it is
//     degraded or cooling down: a slow or overloaded endpoint is better than none (it serves
//     what it can). So brownout and cooldown never take away the last
//     endpoints a group can use, and it does so at once, not when the brownout rule, which
//     compares latencies over a window, next changes its mind (a degraded endpoint's
//     fallback may have just gone down).
//  4. When every connected endpoint of the group is ejected, they are all available: a fault
//     that every endpoint shows (the database, not a path to it, is failing) is no reason to
//     move, and the group keeps its current endpoint and serves from it the moment the fault
//     ends. This is Envoy's panic routing, where too few healthy hosts make a cluster route
//     to all of them (Envoy's outlier detection, max_ejection_percent and the panic
//     threshold; gRFC A50's max_ejection_percent caps ejections the same way).
//
// So a group with a connected endpoint always has an available endpoint, and the verdicts
// depend on the inputs only, never on the order in which they changed.
package verdict

import "strconv"

// Input is what is known of one endpoint of a group at an evaluation.
type Input struct {
	// Connected: the endpoint's pool has a ready connection.
	Connected bool
	// Ejected: the health detector took the endpoint out (its calls kept failing or
	// stalling, or a probe failed).
	Ejected bool
	// Degraded: the brownout rule finds the endpoint far slower than a fallback in this group.
	Degraded bool
	// Cooling: the endpoint answered RESOURCE_EXHAUSTED and is in its overload cooldown, which
	// another endpoint has confirmed by answering a call since (moving helps). Not an
	// ejection: no probe ends it, only its time.
	Cooling bool
}

// Reason says why an endpoint is, or is not, available to its group.
type Reason uint8

const (
	// Usable: connected, not ejected, not degraded. Available.
	Usable Reason = iota
	// NotConnected: its pool has no ready connection. Not available.
	NotConnected
	// Ejected: the health detector took it out. Not available.
	Ejected
	// Degraded: far slower than a usable endpoint of the group. Not available.
	Degraded
	// DegradedLastResort: degraded, but no endpoint of the group is usable. Available.
	DegradedLastResort
	// EjectedEverywhere: ejected, but so is every connected endpoint of the group. Available.
	EjectedEverywhere
	// Cooling: cooling down after RESOURCE_EXHAUSTED while an endpoint of the group is
	// usable. Not available. It wins over Degraded (both mean "not now", and the cooldown is
	// the one with an end).
	Cooling
	// CoolingLastResort: cooling down, but no endpoint of the group is usable. Available.
	CoolingLastResort
)

// reasonKeys are the reasons as metric attribute values: short, stable, snake_case.
var reasonKeys = [...]string{
	Usable:             "usable",
	NotConnected:       "not_connected",
	Ejected:            "ejected",
	Degraded:           "degraded",
	DegradedLastResort: "degraded_last_resort",
	EjectedEverywhere:  "ejected_everywhere",
	Cooling:            "cooling",
	CoolingLastResort:  "cooling_last_resort",
}

// Key returns the reason as a metric attribute value: "usable", "not_connected", "ejected",
// "degraded", "degraded_last_resort", "ejected_everywhere", "cooling" or
// "cooling_last_resort".
func (r Reason) Key() string {
	if int(r) < len(reasonKeys) {
		return reasonKeys[r]
	}
	return "reason_" + strconv.Itoa(int(r))
}

var reasonNames = [...]string{
	Usable:             "usable",
	NotConnected:       "not connected",
	Ejected:            "ejected",
	Degraded:           "degraded",
	DegradedLastResort: "degraded, but no other endpoint is usable",
	EjectedEverywhere:  "ejected, as every connected endpoint of the group is",
	Cooling:            "cooling down after RESOURCE_EXHAUSTED",
	CoolingLastResort:  "cooling down after RESOURCE_EXHAUSTED, but no other endpoint is usable",
}

// String returns the reason in words: "usable", "not connected", "ejected", "degraded",
// "degraded, but no other endpoint is usable", "ejected, as every connected endpoint of
// the group is", "cooling down after RESOURCE_EXHAUSTED", or "cooling down after
// RESOURCE_EXHAUSTED, but no other endpoint is usable".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Reasons returns every reason, in the order of their values: what a metric of verdicts
// reports one series for each of.
func Reasons() []Reason {
	all := make([]Reason, len(reasonNames))
	for i := range all {
		all[i] = Reason(i)
	}
	return all
}

// Available reports whether an endpoint with this reason is available to its group.
func (r Reason) Available() bool {
	return r == Usable || r == DegradedLastResort || r == EjectedEverywhere || r == CoolingLastResort
}

// Evaluate returns the verdict of each endpoint of one group, in the order of in (the
// group's endpoints). It writes the reasons into out, which must have len(in) elements, so
// that a caller that keeps out allocates nothing. Safe for concurrent use on distinct out.
func Evaluate(in []Input, out []Reason) {
	anyUsable, anyNotEjected := false, false
	for i, e := range in {
		switch {
		case !e.Connected:
			out[i] = NotConnected
		case e.Ejected:
			out[i] = Ejected
		case e.Cooling:
			out[i] = Cooling
			anyNotEjected = true
		case e.Degraded:
			out[i] = Degraded
			anyNotEjected = true
		default:
			out[i] = Usable
			anyUsable = true
		}
	}
	if anyUsable {
		return
	}
	for i := range out {
		switch {
		case out[i] == Degraded:
			out[i] = DegradedLastResort
		case out[i] == Cooling:
			out[i] = CoolingLastResort
		case out[i] == Ejected && !anyNotEjected:
			out[i] = EjectedEverywhere
		}
	}
}
