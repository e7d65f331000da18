package client

import (
	"fmt"
	"sync"
)

// Balancer spreads calls over several servers by least outstanding requests:
// each call goes to a server with the fewest calls in flight, so a server
// that answers faster gets more of them. Ties go round robin: the search for
// the least loaded server starts after the server picked last, so an idle
// set of servers takes calls in turn.
//
// A Balancer only counts; the caller makes the call on the server it was
// given. Its methods are safe for concurrent use.
type Balancer struct {
	mu          sync.Mutex
	outstanding []int
	next        int // where the next search starts
}

// NewBalancer returns a balancer over n servers, numbered 0 to n-1.
func NewBalancer(n int) (*Balancer, error) {
	if n < 1 {
		return nil, fmt.Errorf("client: a balancer over %d servers, want at least 1", n)
	}
	return &Balancer{outstanding: make([]int, n)}, nil
}

// Acquire picks the server for a new call and counts the call outstanding
// there until release is called (once, when the call has returned).
func (b *Balancer) Acquire() (server int, release func()) {
	b.mu.Lock()
	n := len(b.outstanding)
	server = b.next
	for k := 1; k < n; k++ {
		if i := (b.next + k) % n; b.outstanding[i] < b.outstanding[server] {
			server = i
		}
	}
	b.outstanding[server]++
	b.next = (server + 1) % n
	b.mu.Unlock()
	var once sync.Once
	return server, func() {
		once.Do(func() {
			b.mu.Lock()
			b.outstanding[server]--
			b.mu.Unlock()
		})
	}
}

// Outstanding returns the calls in flight on each server now.
func (b *Balancer) Outstanding() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.outstanding...)
}
