package gemm

import (
	"runtime"
	"sync/atomic"
	"time"
)

// How the threads wait. A forward pass hands the threads one job per layer,
// some 25 a pass, each a millisecond or less on 16 threads. A goroutine that
// blocks on a channel between two jobs parks its thread, and waking 15 parked
// threads goes through the Go scheduler one thread after another, at every
// job. So a waiting goroutine
// first spins, reading an atomic value, for up to spinFor, and only then
// parks. spinFor bounds what an idle engine burns after its last job; it is
// longer than most waits of a thread that finished its part of a layer
// before the others, even on a host with busy neighbours.
const spinFor = time.Millisecond

// spinCheck is the number of spins between two looks at the clock and two
// yields of the CPU to other threads (osYield, a system call that returns at
// once when no other thread is ready to run). So a spinning goroutine does
// not keep, when there are more threads than CPUs, the threads with work off
// the CPUs for more than a microsecond or so.
const spinCheck = 256

// goschedEvery is how many looks at the clock pass between two yields of the
// goroutine's thread to other goroutines (runtime.Gosched): 4096 spins,
// when every P has a CPU of its own. Gosched is not free even when no other
// goroutine waits: it takes the scheduler's one lock twice, which many
// spinning threads contend for.
// With more threads than Ps, or more Ps than CPUs (GOMAXPROCS above the CPUs
// this process may run on), a spinner holds a P, or a CPU, that goroutines
// with work may be waiting for: there, it yields at every look (yieldEvery).
const goschedEvery = 16

// yieldEvery is goschedEvery for a Context of threads threads, or 1 when they
// are more than the Go scheduler's Ps or the Ps more than the process's CPUs.
func yieldEvery(threads int) int {
	if procs := runtime.GOMAXPROCS(0); threads > procs || procs > runtime.NumCPU() {
		return 1
	}
	return goschedEvery
}

// pause is turn i (from 1) of a loop that spins until another thread
// makes a condition true: every spinCheck turns it yields the CPU to other
// threads (osYield), and every spinCheck*every turns the goroutine's thread
// to other goroutines too (runtime.Gosched). It reports whether it yielded,
// the turns at which a spinner may also look at the clock.
func pause(i, every int) bool {
	if i%spinCheck != 0 {
		return false
	}
	if i%(spinCheck*every) == 0 {
		runtime.Gosched()
	}
	osYield()
	return true
}

// Pause is turn i (from 1) of a loop in which a task waits for what
// another task of the same job writes (conv.Runner's steps that overlap):
// it spins, yielding the CPU and the goroutine's thread now and then as a
// waiting worker of c does. A task may wait only for tasks the job started
// before it: those run on other threads that never wait for it.
func (c *Context) Pause(i int) { pause(i, c.every) }

// The states of a sleeper.
const (
	awake  = 0
	asleep = 1
)

// sleeper is a goroutine that waits for a condition another goroutine makes
// true, spinning first, then parked on a channel. The goroutine that makes
// the condition true calls wake.
type sleeper struct {
	state atomic.Int32
	ch    chan struct{} // holds at most one wake-up
	every int           // looks at the clock between two Gosched calls
}

// newSleeper returns a sleeper of a Context of threads threads.
func newSleeper(threads int) *sleeper {
	return &sleeper{ch: make(chan struct{}, 1), every: yieldEvery(threads)}
}

// wait returns once ready returns true: it spins for up to spinFor, then
// parks until wake. Only the sleeper's own goroutine calls wait.
//
// A wake-up may be meant for an earlier wait: the worker that ends a job
// calls wake after the count it makes zero, and the caller, which may have
// seen the zero first, can be parked in the next job's wait by then. So a
// wait that is woken looks at its condition again, and sleeps again if it
// is false. (It did not: the caller then went on while a worker still ran
// the job, which the race detector caught once in CI, in
// TestLogitsOverEveryTransportEqualInProcessBitForBit on 2 CPUs.)
func (s *sleeper) wait(ready func() bool) {
	for {
		start := time.Now()
		for i := 1; ; i++ {
			if ready() {
				return
			}
			if pause(i, s.every) && time.Since(start) > spinFor {
				break
			}
		}
		s.state.Store(asleep)
		// The condition may have become true before the waker read the
		// state: look once more, after the store.
		if ready() {
			if s.state.CompareAndSwap(asleep, awake) {
				return
			}
			// A waker saw the sleeper asleep and sends a wake-up: take
			// it, so that the next wait does not find it.
			<-s.ch
			return
		}
		<-s.ch
		if ready() {
			return
		}
	}
}

// wake wakes the sleeper if it is parked, or about to park, in wait; call it
// after making the sleeper's condition true. (Go's atomics are sequentially
// consistent: either wait's second look at the condition sees it true, or
// wake sees the state asleep.)
func (s *sleeper) wake() {
	if s.state.Load() == asleep && s.state.CompareAndSwap(asleep, awake) {
		s.ch <- struct{}{}
	}
}
