package pool

// Recheck probes the endpoint at once if it is ejected and its ejection time is over, because
// another endpoint of a group that lists it was just readmitted (health.Detector.Recheck);
// nothing without health. Safe for concurrent use.
func (p *Pool) Recheck() {
	if p.health != nil {
		p.health.Recheck()
	}
}
