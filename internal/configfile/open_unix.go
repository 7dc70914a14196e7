//go:build unix

package configfile

import (
	"os"
	"syscall"
)

// openFlags open a configuration file for reading without blocking: opening a named pipe
// that has no writer would otherwise wait for one.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK
