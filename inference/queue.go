package inference

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// requestQueue holds the accepted calls that no worker (or batcher) has taken
// yet, at most max of them. It decides admission: push accepts a call or says
// why not, under one lock with the state that Shutdown, Close and the loss of
// the last worker change, so that no call is accepted after admission stopped
// and none is left behind when the queue fails.
//
// Nobody polls: a taker (worker or batcher) that finds the queue empty counts
// itself idle and waits for a token on ready; a Submit that finds it full
// (Block policy) counts itself blocked and waits for a token on room. Both
// channels have capacity 1, are sent to without blocking and only when someone
// is counted waiting, and whoever takes a token passes one on while calls (or
// room) and waiters remain, so a token never goes missing while it is needed.
//
// A call whose context can end is watched (context.AfterFunc, which starts a
// goroutine only when the context ends): if it ends while the call is queued,
// the call leaves the queue at once and onDrop answers it. Takers stop the
// watch of the calls they take.
type requestQueue struct {
	max    int
	reject bool // QueuePolicy Reject: push fails at once when full
	onDrop func(c *Call)

	ready   chan struct{} // capacity 1: the queue may hold calls for an idle taker
	room    chan struct{} // capacity 1: the queue may have room for a blocked push
	closing chan struct{} // closed when admission stops

	// pending counts calls accepted and not yet answered: push adds one under
	// mu while admission is open, so no Add races with a Wait begun after stop;
	// whoever answers a call calls Done.
	pending sync.WaitGroup

	mu       sync.Mutex
	list     callList
	idle     int   // takers waiting for a ready token
	blocked  int   // pushes waiting for a room token
	admitErr error // non-nil once admission stopped: what push returns
	finalErr error // non-nil once the queue failed: requeue refuses with it
}

func newRequestQueue(max int, policy QueuePolicy, onDrop func(*Call)) *requestQueue {
	return &requestQueue{
		max: max, reject: policy == Reject, onDrop: onDrop,
		ready: make(chan struct{}, 1), room: make(chan struct{}, 1), closing: make(chan struct{}),
	}
}

// signal leaves a token in ch unless one is there already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// push accepts c: it queues c, marks it being read and pending, and watches
// its context. When the queue is full it fails with ErrQueueFull (Reject) or
// waits for room until c's context ends (Block). After admission stopped it
// returns the reason (ErrServerClosed, or ErrNoWorker wrapping the cause).
func (q *requestQueue) push(c *Call) error {
	waited := false
	q.mu.Lock()
	for {
		if q.admitErr != nil {
			err := q.admitErr
			q.mu.Unlock()
			return err
		}
		if q.list.len < q.max {
			break
		}
		if q.reject {
			q.mu.Unlock()
			return ErrQueueFull
		}
		q.blocked++
		q.mu.Unlock()
		var err error
		select {
		case <-q.room:
		case <-q.closing:
		case <-c.ctx.Done():
			err = c.ctx.Err()
		}
		q.mu.Lock()
		q.blocked--
		if err != nil {
			q.mu.Unlock()
			return err
		}
		waited = true
	}
	q.list.pushBack(c)
	c.reading.Add(1)
	q.pending.Add(1)
	q.watch(c)
	wakeTaker := q.idle > 0
	passRoom := waited && q.blocked > 0 && q.list.len < q.max
	q.mu.Unlock()
	if wakeTaker {
		signal(q.ready)
	}
	if passRoom {
		signal(q.room)
	}
	return nil
}

// watch makes c leave the queue when its context ends. Caller holds mu.
func (q *requestQueue) watch(c *Call) {
	if c.ctx.Done() != nil {
		c.unwatch = context.AfterFunc(c.ctx, func() { q.drop(c) })
	}
}

// drop takes c out of the queue, if it is still there, and hands it to onDrop.
func (q *requestQueue) drop(c *Call) {
	q.mu.Lock()
	removed := q.list.remove(c)
	passRoom := removed && q.blocked > 0
	q.mu.Unlock()
	if !removed {
		return
	}
	if passRoom {
		signal(q.room)
	}
	q.onDrop(c)
}

// wake says why take returned without a call.
type wake int

const (
	took     wake = iota // a call
	quitting             // the quit channel closed
	stopped              // the stop channel closed
	timedOut             // the timer fired
)

// take removes and returns the first call, waiting for one until quit or stop
// closes or the timer fires (nil channels never do); an empty queue is first
// looked at for up to idle (Config.IdlePoll) before the taker sleeps. The
// caller owns the call; its watch is stopped.
func (q *requestQueue) take(quit, stop <-chan struct{}, timer <-chan time.Time, idle time.Duration) (*Call, wake) {
	polled := false
	q.mu.Lock()
	for {
		if c := q.list.popFront(); c != nil {
			passReady := q.idle > 0 && q.list.len > 0
			wakePush := q.blocked > 0
			q.mu.Unlock()
			if passReady {
				signal(q.ready)
			}
			if wakePush {
				signal(q.room)
			}
			c.stopWatch()
			return c, took
		}
		if !polled && idle > 0 {
			polled = true
			q.mu.Unlock()
			poll(idle, func() bool { return q.list.size.Load() > 0 || closed(quit) || closed(stop) })
			q.mu.Lock()
			continue
		}
		q.idle++
		q.mu.Unlock()
		why := took
		select {
		case <-q.ready:
		case <-quit:
			why = quitting
		case <-stop:
			why = stopped
		case <-timer:
			why = timedOut
		}
		q.mu.Lock()
		q.idle--
		if why != took {
			q.mu.Unlock()
			return nil, why
		}
	}
}

// requeue puts c, which a worker took but could not run, first in line again.
// It fails (and the caller answers c) when the queue has failed or is full.
func (q *requestQueue) requeue(c *Call) error {
	q.mu.Lock()
	err := q.finalErr
	if err == nil && q.list.len >= q.max {
		err = ErrQueueFull
	}
	if err != nil {
		q.mu.Unlock()
		return err
	}
	q.list.pushFront(c)
	q.watch(c)
	wakeTaker := q.idle > 0
	q.mu.Unlock()
	if wakeTaker {
		signal(q.ready)
	}
	return nil
}

// stop ends admission: push returns err from now on (the first reason
// given wins). Calls already queued stay.
func (q *requestQueue) stop(err error) {
	q.mu.Lock()
	q.stopLocked(err)
	q.mu.Unlock()
}

func (q *requestQueue) stopLocked(err error) {
	if q.admitErr == nil {
		q.admitErr = err
		close(q.closing)
	}
}

// fail ends admission (with admitErr) for good: it empties the queue and
// returns the calls for the caller to answer with err, and requeue refuses
// with err from now on. The calls' watches are stopped.
func (q *requestQueue) fail(admitErr, err error) []*Call {
	q.mu.Lock()
	q.stopLocked(admitErr)
	if q.finalErr == nil {
		q.finalErr = err
	}
	calls := q.list.takeAll()
	q.mu.Unlock()
	for _, c := range calls {
		c.stopWatch()
	}
	return calls
}

// failed returns the error the queue failed with, or nil.
func (q *requestQueue) failed() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.finalErr
}

// len returns the number of queued calls.
func (q *requestQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.list.len
}

// callList is a FIFO of calls linked through their prev and next fields, so
// that a call can leave it from anywhere in O(1). Not safe for concurrent use,
// except size, which may be read at any time.
type callList struct {
	head, tail *Call
	len        int
	size       atomic.Int64 // len, for takers that poll without the queue's lock
}

// pushBack appends c.
func (l *callList) pushBack(c *Call) {
	c.prev, c.next, c.queued = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.len++
	l.size.Store(int64(l.len))
}

// pushFront puts c first in line.
func (l *callList) pushFront(c *Call) {
	c.prev, c.next, c.queued = nil, l.head, true
	if l.head != nil {
		l.head.prev = c
	} else {
		l.tail = c
	}
	l.head = c
	l.len++
	l.size.Store(int64(l.len))
}

// popFront removes and returns the first call, or nil when l is empty.
func (l *callList) popFront() *Call {
	c := l.head
	if c != nil {
		l.remove(c)
	}
	return c
}

// remove takes c out of l and reports whether it was there.
func (l *callList) remove(c *Call) bool {
	if !c.queued {
		return false
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next, c.queued = nil, nil, false
	l.len--
	l.size.Store(int64(l.len))
	return true
}

// takeAll empties l and returns its calls in order.
func (l *callList) takeAll() []*Call {
	calls := make([]*Call, 0, l.len)
	for c := l.popFront(); c != nil; c = l.popFront() {
		calls = append(calls, c)
	}
	return calls
}

// closed reports whether ch is closed (a nil channel never is).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
