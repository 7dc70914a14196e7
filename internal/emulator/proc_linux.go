package emulator

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the emulator in its own process group, so that
// killProcessGroup reaches any children it starts, and has the kernel kill it
// if the test binary dies without calling Close (a test timeout, a panic, a
// SIGKILL). Pdeathsig fires when the OS thread that started the child exits;
// Go only ends threads whose goroutine exits while locked to it, which nothing
// here does.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
