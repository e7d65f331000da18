package h2grpc

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/inferbench/inferbench/internal/ratelog"
)

// ServerOptions bound what one peer can make a Server hold.
type ServerOptions struct {
	// MaxMessageBytes bounds a received or sent message; 0 means 4 MiB.
	MaxMessageBytes int
	// MaxStreams bounds concurrent calls per connection, a call counting
	// from its HEADERS until its handler has returned, reset by its client
	// or not; calls over it are refused (REFUSED_STREAM). 0 means 100.
	MaxStreams uint32
	// MaxHeaderBytes bounds a call's decoded header list (HPACK sizes:
	// names, values and 32 bytes a field); 0 means 16 KiB.
	MaxHeaderBytes int
	// StreamWindow is each call's receive window: how many bytes a client
	// may send on a call ahead of what the server has taken; a
	// connection's is 4 times it. 0 means 1 MiB; at least 64 KiB.
	StreamWindow int32
	// IdleTimeout closes a connection (GOAWAY, then the socket) on which
	// no call has begun, sent request bytes or ended for this long, calls
	// running or not; PINGs and other control frames do not count. 0 means
	// 5 minutes.
	IdleTimeout time.Duration
	// MinPingInterval is the shortest interval between a client's PINGs
	// that the PING policy allows (see maxPingStrikes): 0 means 5 minutes,
	// grpc-go's keepalive.EnforcementPolicy default.
	MinPingInterval time.Duration
	// PermitPingWithoutCalls allows PINGs every MinPingInterval while no
	// call runs; without it, such PINGs must be 2 hours apart (as grpc-go's
	// PermitWithoutStream false).
	PermitPingWithoutCalls bool
	// HandshakeTimeout bounds the wait for a new connection's preface and
	// SETTINGS; 0 means 10 seconds.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds each write to a connection: a peer that reads
	// nothing for this long is disconnected; 0 means 30 seconds.
	WriteTimeout time.Duration
	// Sink picks how each request message is received; nil means every
	// message is gathered in memory and decoded as protobuf.
	Sink SinkFunc
	// Log, if set, gets a line for each connection ended by an error, at
	// most peerLogLines a peerLogPeriod (then a count of those dropped).
	Log *slog.Logger
	// OnIdle, if set, is told when a connection's open calls go from none
	// to one (idle false) and back to none (idle true), so that a
	// connection limit can tell idle connections from busy ones. It is
	// called with the connection's lock held: it must return promptly and
	// not call the Server.
	OnIdle func(conn net.Conn, idle bool)
	// OnConn, if set, is told of each connection once the server has sent
	// its SETTINGS, with the function that ends it politely: a GOAWAY (no
	// error, the last call the client opened) and the socket's close once
	// its calls have ended, so that a call the client opens meanwhile is
	// known not to have run and can be sent again elsewhere. A connection
	// limit calls it when it evicts the connection.
	OnConn func(conn net.Conn, goodbye func())
}

// The rate limit of a server's log lines about peers: a client can end
// connections with errors as fast as it can open them.
const (
	peerLogLines  = 10
	peerLogPeriod = time.Minute
)

func (o *ServerOptions) setDefaults() {
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 4 << 20
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = 100
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 16 << 10
	}
	if o.StreamWindow <= 0 {
		o.StreamWindow = 1 << 20
	}
	o.StreamWindow = max(o.StreamWindow, 64<<10)
	o.StreamWindow = min(o.StreamWindow, maxWindow/4)
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.MinPingInterval <= 0 {
		o.MinPingInterval = 5 * time.Minute
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
}

// Server serves gRPC services over HTTP/2 with prior knowledge, as gRPC
// clients connect: cleartext (h2c), or over the connections of a TLS
// listener (crypto/tls, with "h2" in its NextProtos). It runs the handlers of the
// grpc.ServiceDesc registered on it, as grpc.Server would, without
// interceptors or compression. It is safe for concurrent use.
type Server struct {
	opts     ServerOptions
	log      *slog.Logger // opts.Log, rate-limited
	methods  map[string]method
	services map[string]grpc.ServiceInfo

	mu       sync.Mutex
	lns      map[net.Listener]bool
	conns    map[*serverConn]bool
	draining bool
	done     chan struct{} // closed when the server stops
	wg       sync.WaitGroup
	workers  *callWorkers // run the calls' handlers
}

type method struct {
	impl   any
	unary  grpc.MethodHandler
	stream *grpc.StreamDesc
}

// NewServer returns a server with options o; register services, then Serve.
func NewServer(o ServerOptions) *Server {
	o.setDefaults()
	var log *slog.Logger
	if o.Log != nil {
		log = slog.New(ratelog.New(o.Log.Handler(), peerLogLines, peerLogPeriod))
	}
	done := make(chan struct{})
	return &Server{opts: o, log: log, methods: map[string]method{}, services: map[string]grpc.ServiceInfo{},
		lns: map[net.Listener]bool{}, conns: map[*serverConn]bool{}, done: done, workers: newCallWorkers(done)}
}

// RegisterService registers a service's handlers, as grpc.Server does.
func (s *Server) RegisterService(sd *grpc.ServiceDesc, impl any) {
	info := grpc.ServiceInfo{Metadata: sd.Metadata}
	for i := range sd.Methods {
		m := &sd.Methods[i]
		s.methods["/"+sd.ServiceName+"/"+m.MethodName] = method{impl: impl, unary: m.Handler}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: m.MethodName})
	}
	for i := range sd.Streams {
		d := &sd.Streams[i]
		s.methods["/"+sd.ServiceName+"/"+d.StreamName] = method{impl: impl, stream: d}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: d.StreamName, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams})
	}
	s.services[sd.ServiceName] = info
}

// GetServiceInfo lists the registered services, for server reflection.
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo { return s.services }

// ErrServerStopped is Serve's error after Stop or GracefulStop, as grpc.Server's.
var ErrServerStopped = grpc.ErrServerStopped

// Serve accepts connections on ln until it fails or the server stops;
// it always closes ln.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.isDone() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerStopped
	}
	s.lns[ln] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isDone() {
				return ErrServerStopped
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := newServerConn(s, nc)
		s.mu.Lock()
		if s.isDone() {
			s.mu.Unlock()
			nc.Close()
			return ErrServerStopped
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

func (s *Server) isDone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stop closes the listeners and marks the server done; it returns the
// connections open at that moment.
func (s *Server) stop() []*serverConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.isDone() {
		close(s.done)
	}
	for ln := range s.lns {
		ln.Close()
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// Stop closes the listeners and every connection now; calls in progress
// have their contexts cancelled and can no longer answer.
func (s *Server) Stop() {
	for _, c := range s.stop() {
		c.nc.Close()
	}
	s.wg.Wait()
}

// GracefulStop closes the listeners, tells every client (GOAWAY) that no
// new call will be taken, and returns once every call in progress has been
// answered and its connection closed.
func (s *Server) GracefulStop() {
	for _, c := range s.stop() {
		c.goAway("server stopping")
	}
	s.wg.Wait()
}

// parseTimeout reads a grpc-timeout header: at most 8 digits and a unit.
func parseTimeout(v string) (time.Duration, error) {
	if len(v) < 2 || len(v) > 9 {
		return 0, fmt.Errorf("malformed grpc-timeout %q", v)
	}
	var n int64
	for _, c := range v[:len(v)-1] {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("malformed grpc-timeout %q", v)
		}
		n = n*10 + int64(c-'0')
	}
	unit := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second, 'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}[v[len(v)-1]]
	if unit == 0 {
		return 0, fmt.Errorf("malformed grpc-timeout %q", v)
	}
	if n > int64(1<<63-1)/int64(unit) {
		return 1<<63 - 1, nil
	}
	return time.Duration(n) * unit, nil
}

// formatTimeout writes d as a grpc-timeout header: 8 digits at most, in
// the finest unit that fits.
func formatTimeout(d time.Duration) string {
	if d <= 0 {
		d = time.Nanosecond
	}
	for _, u := range []struct {
		d time.Duration
		c string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if n := (d + u.d - 1) / u.d; n < 1e8 {
			return fmt.Sprint(int64(n)) + u.c
		}
	}
	return fmt.Sprint(int64(min((d+time.Hour-1)/time.Hour, 99999999))) + "H"
}

// isGRPCContentType reports whether a content-type header names gRPC:
// application/grpc, alone or followed by "+" or ";".
func isGRPCContentType(v string) bool {
	rest, ok := strings.CutPrefix(v, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}
