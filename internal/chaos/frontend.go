package chaos

// DefaultFrontend starts the gRPC frontend of spannermetest behind each TCP fake; nil while
// this build has no such frontend (then the TCP fakes forward straight to the backend and no
// frontend fault is drawn).
var DefaultFrontend NewFrontendFunc

// FrontendsAvailable reports whether DefaultFrontend exists, so that -plan prints the
// schedule a run would draw.
var FrontendsAvailable = DefaultFrontend != nil

// HealthDetectionDefault says whether the client in this build ejects endpoints from call
// outcomes (issue 8): then failed calls under silent faults are bounded, not only counted.
const HealthDetectionDefault = false
