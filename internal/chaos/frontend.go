package chaos

// HealthDetectionDefault says whether the client in this build ejects endpoints from call
// outcomes (issue 8): then failed calls under silent faults are bounded, not only counted.
const HealthDetectionDefault = false
