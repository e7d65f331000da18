//go:build linux

package suite

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// spawner starts server processes from one OS thread that lives as long as
// this process, so that Linux's parent-death signal, which fires when the
// thread that started a child ends (not only the process), kills the servers
// only when the suite itself dies.
var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// startChild starts cmd so that it is killed if this process dies.
func startChild(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		// Lives until the process exits: it owns the thread the children's
		// parent-death signal is tied to.
		go func() {
			runtime.LockOSThread()
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd, done}
	return <-done
}
