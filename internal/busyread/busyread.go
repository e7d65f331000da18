// Package busyread wraps TCP connections so that a Read finding nothing to
// read looks again, without sleeping, for up to a set time before it waits
// as usual. A connection that waits sleeps in the kernel's poller, and on
// a virtual machine the vCPU that must wake for the next message may have
// halted: a request that arrives soon after the previous answer then costs
// a wake-up on each side. Looking instead keeps a CPU busy for up to that
// time after each read (Config.IdlePoll, serve -idle-poll; the suite's
// -client-poll). Between looks the reading goroutine yields, so that the
// goroutines it made ready (the handler of what it read) run at once.
package busyread

import (
	"net"
	"time"
)

// Listener returns l, whose accepted connections look for up to d before a
// Read sleeps; d <= 0 returns l itself.
func Listener(l net.Listener, d time.Duration) net.Listener {
	if d <= 0 {
		return l
	}
	return listener{l, d}
}

type listener struct {
	net.Listener
	d time.Duration
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Conn(c, l.d), nil
}

// Conn returns c, looking for up to d before a Read sleeps: for a TCP
// connection on Linux with d > 0; any other c is returned as it is.
func Conn(c net.Conn, d time.Duration) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok || d <= 0 {
		return c
	}
	return wrap(tc, d)
}
