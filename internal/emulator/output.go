package emulator

import "sync"

// maxOutput is how many bytes of the emulator's combined output are kept: the
// most recent ones, enough for the error messages that explain a failure.
const maxOutput = 64 << 10

// tailBuffer is an io.Writer that keeps the last maxOutput bytes written to
// it. It is safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex // guards buf
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - maxOutput; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
