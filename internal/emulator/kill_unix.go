//go:build unix

package emulator

import (
	"os/exec"
	"syscall"
)

// killProcessGroup sends SIGKILL to the emulator's process group (its pid, see
// setProcAttr), then to the process itself in case the group is already gone.
// The emulator keeps no state worth a graceful shutdown.
func killProcessGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}
