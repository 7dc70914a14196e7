//go:build !unix

package configfile

import "os"

// openFlags open a configuration file for reading (a system without O_NONBLOCK has no named
// pipes that block an open).
const openFlags = os.O_RDONLY
