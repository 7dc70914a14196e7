//go:build unix

package spannermetest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
)

// heldPort is a TCP socket bound to a Down endpoint's address without listening. It keeps
// the port the endpoint's while it is Down, so that no other listener, of this process or
// another (tests of other packages run at the same time), takes it and receives the
// connections meant for the endpoint; and dials are still refused, since the kernel answers
// a connection to a port without a listening socket with a reset (ECONNREFUSED).
type heldPort struct{ fd int }

// holdPort binds a socket to addr ("127.0.0.1:port"). It does not set SO_REUSEADDR: on
// Linux two sockets that both set it may bind one port while neither listens, and Go's
// listeners set it. So connections the endpoint closed gracefully and left in TIME_WAIT on
// the port make it fail (EADDRINUSE): the port is then not held, as before.
func holdPort(addr string) (*heldPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("spannermetest: hold %s: not an IPv4 address and port", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("spannermetest: hold %s: %w", addr, err)
	}
	syscall.CloseOnExec(fd)
	sa := &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	if err := syscall.Bind(fd, sa); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("spannermetest: hold %s: %w", addr, err)
	}
	return &heldPort{fd: fd}, nil
}

// listen makes the held socket listen and returns it as a listener: the port is never free
// between Down and Up. The heldPort is spent either way.
func (h *heldPort) listen() (net.Listener, error) {
	fd := h.fd
	h.fd = -1
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "spannermetest-endpoint")
	defer f.Close() // FileListener holds a duplicate
	return net.FileListener(f)
}

// release frees the port. Idempotent.
func (h *heldPort) release() {
	if h.fd >= 0 {
		_ = syscall.Close(h.fd)
		h.fd = -1
	}
}
