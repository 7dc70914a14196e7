package spannermetest

import (
	"io"
	"time"

	"golang.org/x/net/http2"
)

// goAwayTimeout bounds a DieYoung connection's exchange: a client that
// sends nothing is closed after it.
const goAwayTimeout = 2 * time.Second

// goAway serves a connection accepted in DieYoung mode: the server's
// connection preface (a SETTINGS frame), the client's preface and SETTINGS
// read and acknowledged, then GOAWAY with NO_ERROR and the close. Runs in
// its own goroutine started by spawn.
func (l *link) goAway() {
	defer l.drop(false)
	c := l.client
	_ = c.SetDeadline(time.Now().Add(goAwayTimeout))
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	// The client's first frame after its preface is its SETTINGS (RFC 9113,
	// section 3.4).
	if f, err := fr.ReadFrame(); err != nil {
		return
	} else if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		return
	}
	if err := fr.WriteSettingsAck(); err != nil {
		return
	}
	_ = fr.WriteGoAway(0, http2.ErrCodeNo, []byte("spannermetest: DieYoung"))
}
