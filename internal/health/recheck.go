package health

// Recheck probes the endpoint at once, with a probe of the class that ejected it, because
// another endpoint of a group that lists it was just readmitted: the fault that ejected both
// (a fault of the database that every endpoint shows, say) may be over, and this endpoint
// must not wait up to a ProbeInterval for its next probe to find out. A group kept on it by
// rule 4 of internal/verdict (every connected endpoint ejected, so every one stays
// available) loses that rule at the first readmission; if this endpoint is not readmitted
// within the group's RecoveryTimeout, the group moves to the endpoint readmitted first, and
// back after SwitchingDelay: two switches for a fault that was everywhere.
//
// It does nothing unless the endpoint is ejected, its ejection time is over (before that,
// no probe may readmit it: rule 7) and there is a Probe function. A probe under way is
// superseded: it started before the other endpoint's readmission, so what it finds may be
// the fault that just ended, and its result is ignored when it ends (ProbeDone ignores a
// probe that is not the one under way). Safe for concurrent use.
func (d *Detector) Recheck() {
	d.mu.Lock()
	var seq uint64
	class := d.class
	if !d.closed && d.out && d.probe != nil && !d.clock.Now().Before(d.until) {
		seq = d.startProbeLocked(class)
	}
	d.mu.Unlock()
	if seq != 0 {
		d.probe(seq, class)
	}
}

// Connected tells the detector that the endpoint has a ready connection again. If it is
// ejected, its ejection time is over and no probe is under way, it probes at once, with a
// probe of the class that ejected it: the probe due when the ejection time ended found no
// connection (skipped: ErrProbeSkipped) and the next one is a ProbeInterval away, which the
// endpoint must not wait for now that it can be probed. A probe under way is left to finish
// (it started on a ready connection). It does nothing otherwise, nor without a Probe
// function. Safe for concurrent use.
func (d *Detector) Connected() {
	d.mu.Lock()
	var seq uint64
	class := d.class
	if !d.closed && d.out && d.probe != nil && d.probeSeq == 0 && !d.clock.Now().Before(d.until) {
		seq = d.startProbeLocked(class)
	}
	d.mu.Unlock()
	if seq != 0 {
		d.probe(seq, class)
	}
}
