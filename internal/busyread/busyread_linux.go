package busyread

import (
	"net"
	"runtime"
	"syscall"
	"time"
)

// conn is a TCP connection whose Read looks before it sleeps.
type conn struct {
	*net.TCPConn
	raw syscall.RawConn
	d   time.Duration
}

func wrap(c *net.TCPConn, d time.Duration) net.Conn {
	raw, err := c.SyscallConn()
	if err != nil {
		return c
	}
	return &conn{TCPConn: c, raw: raw, d: d}
}

// clockEvery is how many looks Read takes between two looks at the clock.
const clockEvery = 16

// Read returns what the socket holds as soon as it holds something, looking
// (a non-blocking read(2), then a yield) for up to d; after that, and for
// anything but data or an empty socket (an error, the peer's end, a
// deadline), it is the connection's own Read, which sleeps until there is
// something and reports errors as the net package does.
func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Read(p)
	}
	// One closure a Read, not one a look: the spin allocates nothing.
	n, empty := 0, false
	look := func(fd uintptr) bool {
		var err error
		n, err = syscall.Read(int(fd), p)
		empty = err == syscall.EAGAIN
		return true // never wait in the poller here
	}
	var start time.Time
	for i := 0; ; i++ {
		if err := c.raw.Read(look); err != nil {
			break
		}
		if n > 0 {
			return n, nil
		}
		if !empty {
			break
		}
		if i%clockEvery == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) > c.d {
				break
			}
		}
		runtime.Gosched()
	}
	return c.TCPConn.Read(p)
}
