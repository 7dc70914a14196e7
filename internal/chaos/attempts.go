package chaos

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spannerme/spanner-multiendpoint/spannerme"
)

// maxAttemptsShown is how many of a failed call's attempts its line in the report shows: the
// last ones, where a call that failed ended up.
const maxAttemptsShown = 6

// attemptsText says what the client did with a failed call, from its CallInfo: each attempt's
// endpoint (name gives e1, e2, e3 for an address), method, start and end relative to the call's
// start, how it ended (its gRPC code, or "running" for a stream that had not ended, such as a
// hedge that lost), and whether it was steered, resent or hedged. At most the last
// maxAttemptsShown attempts, with the count of those left out; "no attempt" when none was sent
// (the call failed before any RPC through a group, or only on the Spanner client's own
// contexts).
func attemptsText(as []spannerme.CallAttempt, start time.Time, name func(string) string) string {
	if len(as) == 0 {
		return "no attempt"
	}
	var b strings.Builder
	if n := len(as) - maxAttemptsShown; n > 0 {
		fmt.Fprintf(&b, "(%d earlier) ", n)
		as = as[n:]
	}
	for i, a := range as {
		if i > 0 {
			b.WriteString(", ")
		}
		method := a.Method[strings.LastIndexByte(a.Method, '/')+1:]
		fmt.Fprintf(&b, "%s %s +%.2fs", name(a.Endpoint), method, a.Start.Sub(start).Seconds())
		switch {
		case a.End.IsZero():
			b.WriteString(" running")
		case a.Err == nil:
			fmt.Fprintf(&b, "-%.2fs OK", a.End.Sub(start).Seconds())
		default:
			fmt.Fprintf(&b, "-%.2fs %v", a.End.Sub(start).Seconds(), codeOf(a.Err))
		}
		if a.SteeredFrom != "" {
			fmt.Fprintf(&b, " steered from %s (%s)", name(a.SteeredFrom), a.Steered)
		}
		if a.ResentFrom != "" {
			fmt.Fprintf(&b, " resent from %s", name(a.ResentFrom))
		}
		if a.Hedge {
			b.WriteString(" hedge")
		}
		if a.Hedged {
			b.WriteString(" hedged")
		}
		if a.Won {
			b.WriteString(" won")
		}
	}
	return b.String()
}

// codeOf is err's gRPC code: a status error's own, a context error's (DeadlineExceeded,
// Canceled), Unknown for any other.
func codeOf(err error) codes.Code {
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return status.FromContextError(err).Code()
}
