// Package chaos is the chaos soak of spannerme (`make chaos`, cmd/spannerme-chaos): random
// faults of every kind under a read-write load, then a table of invariants that prove
// nothing was lost.
//
// # Topology
//
// ONE backend (the in-memory spannertest, or the Cloud Spanner emulator) and three fake PSC
// endpoints e1, e2, e3 in front of it, all on 127.0.0.1:
//
//	client pool --> TCP fake (spannermetest.Endpoint: the PSC address)
//	            --> gRPC frontend (spannermetest.Frontend: HTTP/2 ends here, as at a Google frontend)
//	            --> backend
//
// so that each endpoint has both fault layers: the network path to the PSC address, and the
// service behind the frontend whose connections stay READY while it fails. With NoFrontends
// the TCP fakes forward straight to the backend. Three groups: default = [e1 e2 e3] and
// west = [e3 e1] at first (reconfigurations change both), and tiered = [[e1 e2] e3]
// (Settings.Tiers: a top tier of two members over e3, SlowStart 2s), whose calls are spread
// over its top tier's members and which keeps its tiers for the whole run
// (UpdateMultiEndpoints keeps Settings.Tiers, so a reconfiguration gives it [e1 e2 e3]);
// RecoveryTimeout 500ms,
// SwitchingDelay 1s; health from call outcomes on, with ejection times and intervals
// compressed like the schedule (healthSettings); brownout detection on with its defaults
// (Ratio 4, Margin 200ms, Window 10s, latency probes every 2s).
//
// # Load
//
// Seventeen workers (see workers), each with its own deadline per call (3s to 20s): read-write
// transfers between accounts (fixture.TransferInTx; each transfer worker owns its accounts,
// because spannertest does not isolate concurrent read-write transactions), inserts with a
// unique RequestId into Inserts (a RowId per transaction attempt, so a double commit
// shows), strong point reads, SUM/COUNT queries, and streaming queries of 400 Events rows
// checked row by row, and a heavy query (COUNT(*) of Events every 50ms, marked with the
// heavyQueryHeader metadata: the query the database refuses in a query-overload); the workers on
// "west" and "tiered" (point reads, inserts, streaming queries; five readers on "tiered", so that
// a member's share of its tier has calls to be judged on even when each takes a second) route
// their calls with spannerme.NewMEContext.
// On the emulator, read-write transactions run one at a time (it fails concurrent ones).
//
// # Schedule
//
// A Plan is a pure function of the seed, the duration and whether frontends exist
// (NewPlan; cmd/spannerme-chaos -plan prints it). After a 2s warm-up, phases in which every
// group keeps a healthy endpoint (no hard fault) alternate with short phases (0.5s to 2.5s)
// in which every endpoint is down. In the first kind, a step is drawn every 200ms to 1.5s
// with the odds of weights among the kinds that can apply (a hard fault that would leave a
// group without a healthy endpoint cannot), and each fault holds 300ms to 5s:
//
//	down               TCP fake's listener closed: dials refused, connections reset (hard)
//	reset              every connection reset, reconnects served (instant)
//	blackhole          connections reset, reconnects accepted and never answered (hard)
//	silent-blackhole   connections stop carrying bytes without a reset (hard, silent)
//	slow               5-80ms one-way latency, half the time a 128 KiB/s-1 MiB/s limit
//	                   (with the limit, a call out of its deadline while every healthy
//	                   endpoint of its group is so held counts as under a silent fault)
//	fe-unavailable     the frontend answers every call UNAVAILABLE (hard, silent)
//	fe-hang            the frontend holds every call unanswered (hard, silent)
//	fe-partial         5%, 20%, 50% or 90% of calls UNAVAILABLE (silent; hard from 50%)
//	fe-latency         10-300ms before each call
//	fe-restart         the frontend drops every connection without GOAWAY (instant)
//	fe-partial-reset   the frontend drops half of its connections, calls in flight on them
//	                   (instant; a load balancer recycling some)
//	fe-commit-fail     every Commit answered UNAVAILABLE, every other call passes (silent: a
//	                   gray failure, writes refused and reads fine)
//	fe-brownout        350-600ms before each call, held 18-26s (Window+8s to Window+16s, not
//	                   300ms-5s), so that the client degrades the endpoint; calls succeed
//	                   (neither hard nor silent); at most one at a time, only where the
//	                   phase leaves it the room (never cut short, so never in a 20s run:
//	                   phases of 10s at most). While it holds, its endpoint and a fallback
//	                   (fault-free, listed with it) take no other step and reconfigurations
//	                   keep them in one group, neither being the GOAWAY storm's: the client
//	                   degrades only against a fast fallback measured throughout the Window
//	fe-commit-fail-long fe-commit-fail held 15-40s (commitLongMin to commitLongMax, at most
//	                   to the phase's end), on an endpoint without a TCP fault that serves a
//	                   group: hard for the plan (every group keeps another healthy endpoint
//	                   while it holds), so the client must eject it for its writes once and
//	                   keep every commit away until the fault ends
//	member-flap        a member of tiered's top tier goes down (listener closed, flap-down)
//	                   and comes back (flap-up) in turn, each for 0.5-1.5s (a cycle of 1-3s),
//	                   for 6-30s (flapMin to flapMax; only where the phase leaves it 6s); the
//	                   other member, its peer, is fault-free (no step on it for 2s before),
//	                   not the GOAWAY storm's, and,
//	                   like the flapping member, takes no other step meanwhile; hard while
//	                   down; every group keeps a healthy endpoint with the member down
//	die-young          the TCP fake answers every new connection with HTTP/2 SETTINGS,
//	                   then GOAWAY(NO_ERROR), and closes it (spannermetest Endpoint.DieYoung:
//	                   a draining proxy or load balancer); its live connections are reset
//	                   when it begins, so the client reconnects into it; held 4-10s
//	                   (dieYoungMin to dieYoungMax) (hard: no connection lives)
//	query-overload     the database refuses the heavy query at every frontend with
//	                   RESOURCE_EXHAUSTED and no RetryInfo (a query over a resource limit);
//	                   every other call passes; held 3-8s (overloadMin to overloadMax)
//	db-overload        the database sheds load: every frontend fails 30% of the application's
//	                   data calls (not session calls, not the client's probes) with
//	                   RESOURCE_EXHAUSTED carrying a RetryInfo of 300ms, all at one time;
//	                   held 3-8s
//	reconfigure        UpdateMultiEndpoints: each group without tiers 1-3 endpoints in a
//	                   random order (one draw in four restores the first configuration)
//
// query-overload and db-overload are the database's, not an endpoint's (State.Database): one
// interceptor shared by the three frontends (dbOverload) injects them, on top of whatever
// fault each endpoint has, one at a time, neither hard nor silent; they need frontends. Moving a
// group to another endpoint relieves neither, so the client must not (issue 40).
//
// With frontends, one all-down phase in eight (dbOdds), where the run leaves it room, is a
// database-wide failure instead: every fault is healed, 24s pass without one (dbLeadIn: the
// longest ejection, 20s, a readmission probe and a SwitchingDelay, so the client is settled),
// then every endpoint's frontend answers every call UNAVAILABLE (db-unavailable, hard and
// silent on each) for 8-12s, all healed at one time, and 5s pass without a fault (dbAfter).
//
// With frontends, one endpoint's frontend also ends every connection at an age of 0.5s to 2s
// (a GOAWAY storm, calls cut 2s to 10s later) for the whole run: gRPC fixes the age when the
// server starts. A 5s cool-down without faults ends the run.
//
// "Hard" faults leave an endpoint unable to serve; "silent" ones do so on READY
// connections, where connectivity alone never fails a group over: only outcome-based health
// (issue 8) does. Ejections and readmissions are printed as they happen (">>" lines), and so
// are brownout degradations and their ends (Status is polled every 200ms; BrownoutStatus.Since
// dates them).
//
// # Invariants
//
// Verified at the end through a direct client (no fake endpoint in between):
//
//   - total balance conserved; every balance = seed + the transfers that committed;
//   - every acknowledged commit (transfer or insert) present exactly once: "lost" counts
//     those that are not;
//   - no other row: no failed write that never sent Commit is present, no insert twice;
//   - commits with unknown outcome (the call failed after sending Commit) settled by their
//     ID and counted: those that committed are done, the others are failed calls;
//   - every successful read consistent (stream rows exact, 8 accounts, no negative balance,
//     and on the emulator SUM(Balance) = the seed total on every read: spannertest shows a
//     commit's mutations one by one);
//   - failed calls while every group had a healthy endpoint and no silent fault was in
//     force on its endpoints: 0, each listed with its code, the faults in force and its
//     attempts (spannerme.CallInfo: endpoint, method, times, outcome, steered, resent, hedged);
//   - failed calls while a member of the group's current tier was fault-free: 0. A group's
//     current tier is its first tier with a healthy endpoint (a group without tiers: its first
//     healthy endpoint alone); a failed call is judged when its group and the default group
//     each kept a fault-free member (no fault on either layer) in their current tier at every
//     state it ran through, and no silent fault was on their endpoints (the silent row's);
//     the row counts them per group (tierFailures);
//   - every member flap whose peer stayed healthy (no fault on it from flapQuiet, 2s, before the
//     flap to its end, and not ejected meanwhile): no switch of the tiered group from an
//     endpoint of its top tier (away from it, or to the peer) from the flap's start to
//     RecoveryTimeout after its end: a member going down while its peer is available moves
//     its calls to the peer, with no switch (judgeMemberFlaps);
//   - failed calls under silent faults: counted while the client has no outcome-based
//     health; with it (HealthDetection), per worker and fault at most the call in flight
//     when the fault began and the calls started before the group failed over, each held
//     to the worker's deadline d: 1 + ceil(5.5s / d) (silentBound). A call out of its deadline
//     while every healthy endpoint of its group, or of the default group, was held to a
//     bandwidth limit counts here too (State.limitedOnly: it waited behind the load's bytes,
//     and no failover reaches a path that carries them); the bound holds for it because a
//     slow fault lasts at most 5s;
//   - failed calls while a group had no healthy endpoint: counted (nothing could serve them);
//   - failed calls the database refused (RESOURCE_EXHAUSTED with the overloads' message,
//     classOverload): counted, not lost, judged by the two overload rows below;
//   - every die-young fault of at least 3s: from dieYoungSettle (2s) after its start to its
//     heal, at most dieYoungRate (30 at the run's ReconnectMaxDelay) connections reach the endpoint in any second (its TCP
//     fake's accepted connections, sampled every 100ms; two samples a late one leaves more
//     than a second apart are held to that span's bound, dieYoungAllowed; a plain grpc-go
//     ClientConn makes 1 in 10s); its failed calls are judged by the rows above (it is hard, not silent: a group
//     with another healthy endpoint fails none);
//   - every query-overload: the heavy query fails with RESOURCE_EXHAUSTED at most 1.5
//     frontend calls each on average (the client neither resends it elsewhere nor retries
//     it), one more when a connection to an endpoint of its group was cut meanwhile (a
//     refusal lost on it, the query resent), no other call is refused, no pool is seen
//     cooling down (PoolStatus.Cooldown, polled every 100ms) and no group switches to a fallback away from an endpoint without a fault
//     (from the fault's start to RecoveryTimeout after its heal, faults of the 5s before
//     counted: justifyLookback);
//   - every db-overload: at most 1% of the reads that ended during it failed, and no switch as
//     above; writes refused and the cooldowns seen are counted;
//   - every scheduled step applied; every group back on an Available, READY endpoint after
//     the last heal;
//   - with HealthDetection, every ejection happened while a fault was in force on that
//     endpoint, or within 5s after one ended (justifyLookback): resets, fe-restart,
//     fe-partial-reset and the GOAWAY storm are connectivity's and never justify one;
//   - every database-wide failure: the client settled when it began (each group on its
//     first endpoint, usable, none of its endpoints ejected); no group switch from its start
//     to dbAfter (5s) after its heal (rule 4 of internal/verdict: with every connected
//     endpoint of a group ejected, they stay available; a switch that a reconfiguration of
//     the schedule made is the operator's, listed apart); and each group's first endpoint
//     forwards an application call (not a probe) within 1s of the heal (dbServeBound);
//   - every long commit failure on an endpoint E makes one burst of refused writes: the
//     application Commits E's frontend refused after E's first ejection for writes during
//     the fault, plus RecoveryTimeout and 0.5s (burstGrace: calls picked before the group
//     failed over), are 0, but for those sent while a group of E had no other usable
//     endpoint (rule 4 again: by the plan's faults and the ejections, or by the client's own
//     log of it, lastResortLog), and E is not readmitted while its commits fail (only a probe
//     of the writes class may readmit it); the row counts the commits of the first bursts;
//   - every brownout degradation (an endpoint degraded in a group) happened while a slow
//     fault (fe-brownout, fe-latency, slow) was in force on that endpoint, or within 15s
//     (Window+5s, degradeLookback) after one ended: no degradation without a slow fault;
//     the row counts the degradations;
//   - goroutines back to their baseline after Close (goleak), heap after Close and GC within
//     16 MiB of its baseline; with -race, no race (cmd/spannerme-chaos counts the race
//     detector's reports on its stderr).
//
// # Failover table
//
// Before the invariants, the run prints how fast the client recovered (issue 43). Every call of
// the load names its group in a header (groupHeader) and each frontend reports the application
// calls it served successfully (failoverWatch.served). Every fault that makes an endpoint
// unusable (down, blackhole, silent-blackhole, die-young, fe-unavailable, fe-hang, fe-partial
// of 50% or more, fe-brownout, a member flap) starts an episode for each group whose calls the
// endpoint served when it began (its current endpoint in Status; for tiered, a member of its
// current tier) and that keeps another healthy endpoint. Per kind (a tier's episodes in a row of
// their own, "[tier]"):
//
//   - failover: from the fault's start to the arrival, at another endpoint's frontend, of the
//     group's first call that succeeded there (the earliest arrival after the start of the
//     calls that succeeded; the time the backend then took to answer it is the backend's: on
//     the emulator 0.1 s to over 1 s after an outage). A time within its bound only because it
//     ends at the arrival, not the answer, is listed under the invariant, not failed. A fault
//     that healed within its bound before the group moved needed none ("healed"); a group that
//     kept another healthy endpoint for the whole bound without a success there counts as
//     never;
//   - back: from the heal, when it made the endpoint the group's first healthy one again (a
//     member of its current tier), to the arrival of the group's first call that succeeded on
//     it (listed, like a failover, when within its bound only because of the arrival); for a
//     tier, to the end of the first second in which the tier had at least shareMin successful
//     calls and the member 35% of them (its full share after slow start, fullShare; its calls
//     counted by arrival too). Measured only while the endpoint stays where the group's calls
//     belong, with no fault on either layer, to the time's end or, for a time over its bound,
//     to the bound (an endpoint with a fault still in force at the heal, hard or soft, is
//     censored; a fault after the bound does not excuse a late way back); never when the
//     whole bound passed so. A reset or a frontend restart of the endpoint within that span
//     (instant: no fault in force) starts the time again at the cut, against the same bound:
//     the client reconnects and its way back starts again (cutAfter). A way
//     back over its bound has the part of it during which every worker was still held taken
//     off, when the group switched back within the bound (a tier member: to its tier) but an
//     endpoint its calls were on until then (a tier: or during the ramp after that switch,
//     which still sends part of them there) had a fault that holds calls (a frontend hang, a
//     silent blackhole): the load's workers, one call in flight each, waited there, none free
//     to call the healed endpoint. The last call sent into the hold is released at
//     heldDeadline, or sooner when that endpoint's connections are cut (heldUntil, release);
//     the time from the switch back to that release is taken off, a release before the
//     switch back excuses nothing, and a way back that came before it is not timed. A
//     failover is censored when the group's next
//     endpoint had a fault of its own meanwhile;
//   - lost: of the group's calls that ended from the start to the heal, the share that failed
//     while the group had another usable endpoint (the database's refusals left out).
//
// Each time is printed as count, p50, p99, max and the bound the docs give for the kind with the
// run's settings: failover within RecoveryTimeout and one connect (ReconnectMaxDelay and
// MinConnectTimeout: 1.75s) for connectivity's faults, silentDetection (5.5s) for those that
// eject, the brownout Window, two latency samples and RecoveryTimeout (14.5s) for a brownout;
// back within the same time to be usable again (one connect; MaxEjectionTime and a
// ProbeInterval, 21s; Window and two samples) and SwitchingDelay (no jitter), or for a tier its
// SlowStart and the second in which its share is measured. The row "failover and switch-back
// p99 within each kind's bound" fails when a p99 passes its bound; it names each kind's
// longest failover and way back, the latter with its group's switches from the heal to its
// end, and lists every way back over the bound when there is more than one. Without frontends the table is not made.
//
// A failed call is attributed to every state the run went through while it ran: the call's
// group and the default group (the Spanner client's session RPCs use it) are judged at each.
package chaos
