//go:build !linux

package suite

import "os/exec"

// startChild starts cmd (a child left running if this process dies).
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
