package protocol

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/stats"
)

// ConnTracker learns which connections have calls in progress, so that a
// connection limit closes only idle ones to make room (package connlimit's
// Listener is one). GRPCLimits.Conns passes it to the gRPC servers; an
// http.Server reports to it from its ConnState hook.
type ConnTracker interface {
	// SetBusy says whether the connection c, as the listener gave it or
	// wrapped (a *tls.Conn), has a call in progress.
	SetBusy(c net.Conn, busy bool)
	// Lookup returns the open connection whose remote address is addr, or
	// nil.
	Lookup(addr net.Addr) net.Conn
	// SetGoodbye gives the connection c the server's way of ending it
	// politely (h2grpc: GOAWAY, then the close once its calls end), for
	// the limit to use in place of closing it.
	SetGoodbye(c net.Conn, goodbye func())
}

// callTracker is a grpc-go stats.Handler that counts each connection's
// calls and tells a ConnTracker when the count crosses zero: grpc-go reports
// a connection by its addresses, and a call's begin and end by the context
// its connection's tag is in.
type callTracker struct{ t ConnTracker }

// connCalls is one connection's count of calls in progress.
type connCalls struct {
	conn net.Conn // nil: not one of the tracker's
	mu   sync.Mutex
	n    int
}

type connCallsKey struct{}

func (h callTracker) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connCallsKey{}, &connCalls{conn: h.t.Lookup(info.RemoteAddr)})
}

func (callTracker) HandleConn(context.Context, stats.ConnStats) {}

func (callTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (h callTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	var d int
	switch s.(type) {
	case *stats.Begin:
		d = 1
	case *stats.End:
		d = -1
	default:
		return
	}
	cc, _ := ctx.Value(connCallsKey{}).(*connCalls)
	if cc == nil || cc.conn == nil {
		return
	}
	cc.mu.Lock()
	defer cc.mu.Unlock() // the tracker hears one connection's changes in order
	cc.n += d
	switch {
	case d > 0 && cc.n == 1:
		h.t.SetBusy(cc.conn, true)
	case d < 0 && cc.n == 0:
		h.t.SetBusy(cc.conn, false)
	}
}
