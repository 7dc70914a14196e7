//go:build !unix

package emulator

import "os/exec"

// setProcAttr does nothing where there are no process groups.
func setProcAttr(*exec.Cmd) {}

// killProcessGroup kills the emulator process.
func killProcessGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
