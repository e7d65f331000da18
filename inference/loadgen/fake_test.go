package loadgen

import (
	"context"
	"sync"
	"time"
)

// fakeTarget is a server on simulated time. Each request takes Service; with
// Workers 0 every request runs at once, with Workers 1 they queue and run one
// after another. Hooks let a test stall or fail chosen requests (counted from
// 0 in Send order, the warm-up included).
type fakeTarget struct {
	Service time.Duration
	Workers int // 0 (unlimited) or 1
	// ServiceAt, if set, replaces Service: the service time of a request
	// admitted at now (a target whose speed changes over time).
	ServiceAt func(now time.Time) time.Duration

	SendDelay func(i int) time.Duration // Send blocks this long (admission stall)
	SendErr   func(i int) error         // Send fails
	WaitErr   func(i int) error         // the response is an error
	// Requests admitted from HoldFrom on get no response before HoldUntil
	// (a response stall).
	HoldFrom, HoldUntil time.Time

	mu          sync.Mutex
	busyUntil   time.Time
	outstanding int
	maxOut      int
	reqs        []fakeReq
}

// fakeReq is what the target saw of one request.
type fakeReq struct {
	At     time.Time // intended send time, from the generator
	Sent   time.Time // when Send was called
	Done   time.Time // when the response left (zero if Send failed)
	OutNow int       // requests outstanding right after this one was admitted
}

func (f *fakeTarget) Send(ctx context.Context, at time.Time) (func() error, error) {
	f.mu.Lock()
	i := len(f.reqs)
	f.reqs = append(f.reqs, fakeReq{At: at, Sent: time.Now()})
	f.mu.Unlock()

	if f.SendDelay != nil {
		if d := f.SendDelay(i); d > 0 {
			time.Sleep(d)
		}
	}
	if f.SendErr != nil {
		if err := f.SendErr(i); err != nil {
			return nil, err
		}
	}

	f.mu.Lock()
	now := time.Now()
	start := now
	if f.Workers == 1 && f.busyUntil.After(now) {
		start = f.busyUntil
	}
	service := f.Service
	if f.ServiceAt != nil {
		service = f.ServiceAt(now)
	}
	done := start.Add(service)
	if f.Workers == 1 {
		f.busyUntil = done
	}
	if !now.Before(f.HoldFrom) && done.Before(f.HoldUntil) {
		done = f.HoldUntil
	}
	f.outstanding++
	f.maxOut = max(f.maxOut, f.outstanding)
	f.reqs[i].OutNow = f.outstanding
	f.mu.Unlock()

	return func() error {
		time.Sleep(time.Until(done))
		f.mu.Lock()
		f.outstanding--
		f.reqs[i].Done = time.Now()
		f.mu.Unlock()
		if f.WaitErr != nil {
			return f.WaitErr(i)
		}
		return nil
	}, nil
}

// requests returns a copy of what the target saw.
func (f *fakeTarget) requests() []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeReq(nil), f.reqs...)
}
