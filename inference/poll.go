package inference

import "time"

// pollCheck is how many looks a poller takes between two looks at the
// clock.
const pollCheck = 64

// poll calls ready until it reports true or d has passed, and reports whether
// it did. It keeps its thread busy all the while: see Config.IdlePoll.
func poll(d time.Duration, ready func() bool) bool {
	if d <= 0 {
		return false
	}
	start := time.Now()
	for i := 1; ; i++ {
		if ready() {
			return true
		}
		if i%pollCheck == 0 && time.Since(start) > d {
			return false
		}
	}
}

// PollDone looks at done and at cancel for up to d (Config.IdlePoll) and
// reports whether either closed meanwhile; the caller then waits on them as
// usual. The front door calls it before it sleeps on a call's answer (done)
// or its request's end (cancel; nil if it cannot end).
func PollDone(d time.Duration, done, cancel <-chan struct{}) bool {
	return poll(d, func() bool { return closed(done) || closed(cancel) })
}
