package h2grpc

// reportIdle tells ServerOptions.OnIdle that the connection became idle
// (or busy), when changed says its count of calls crossed zero (a call
// counts until its handler returns, as for MaxStreams). Caller holds c.mu,
// so the calls for one connection come in order.
func (c *serverConn) reportIdle(changed, idle bool) {
	if changed && c.s.opts.OnIdle != nil {
		c.s.opts.OnIdle(c.nc, idle)
	}
}
