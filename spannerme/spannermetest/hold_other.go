//go:build !unix

package spannermetest

import (
	"errors"
	"net"
)

// heldPort is not available on this system: a Down endpoint frees its port until Up.
type heldPort struct{}

func holdPort(string) (*heldPort, error) { return nil, errors.New("spannermetest: no port hold here") }

func (h *heldPort) listen() (net.Listener, error) { return nil, errors.New("spannermetest: no port hold here") }

func (h *heldPort) release() {}
