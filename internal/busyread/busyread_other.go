//go:build !linux

package busyread

import (
	"net"
	"time"
)

func wrap(c *net.TCPConn, _ time.Duration) net.Conn { return c }
