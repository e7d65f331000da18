package h2grpc

import "time"

// callWorkers runs calls' handlers on goroutines that outlive a call. A new
// goroutine starts with a small stack, and an inference handler's calls
// grow it several times (copying it each time); a goroutine kept for the
// next call keeps the stack it grew. A goroutine with no call for
// workerIdle, or when the server stops, exits.
type callWorkers struct {
	next chan func()   // unbuffered: a send succeeds only into an idle worker
	done chan struct{} // the server's: closed when it stops
}

const workerIdle = 10 * time.Second

func newCallWorkers(done chan struct{}) *callWorkers {
	return &callWorkers{next: make(chan func()), done: done}
}

// run runs f on an idle worker, or on a new one when none is idle.
func (w *callWorkers) run(f func()) {
	select {
	case w.next <- f:
	default:
		go w.loop(f)
	}
}

func (w *callWorkers) loop(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(workerIdle)
		select {
		case f = <-w.next:
		case <-t.C:
			return
		case <-w.done:
			return
		}
	}
}
