//go:build unix && !linux

package emulator

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the emulator in its own process group, so that
// killProcessGroup reaches any children it starts.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
