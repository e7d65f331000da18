// Package connlimit bounds the connections a server holds open without
// letting idle, slow or pinging clients lock everyone else out, health
// probes included.
//
// A Listener admits each connection it accepts in three steps:
//
//  1. while fewer than Config.Max connections are open, it joins them;
//  2. when Max are open, the one idle longest makes room for it and is
//     closed (through the server's goodbye, if it gave one: SetGoodbye):
//     idle means no request in progress, as the server reports
//     through SetBusy, for at least Config.Grace, counted from the end of
//     its last request or from its opening if it has made none; a
//     connection with a request in progress is never closed here, nor one
//     whose client may be about to reuse it;
//  3. when none of the Max is idle, it joins the reserve (up to
//     Config.Reserve more connections), which the server accepts from
//     Reserve() and serves only health checks, each connection for at most
//     Config.ReserveLifetime; a full reserve makes room the same way (the
//     oldest without a request in progress goes, else the oldest busy for
//     longer than ReserveAnswer), and when nothing can go the new
//     connection is closed at once.
//
// Unlike golang.org/x/net/netutil.LimitListener, a full Listener keeps
// accepting: a connection waiting in the kernel's backlog would get no
// answer at all, not even to a health probe.
package connlimit

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	// DefaultGrace is how long a connection stays safe from eviction
	// after it opened or its last request ended: time for a TLS handshake
	// and a first request, or for a keep-alive client to send its next
	// one, which would be lost if the connection closed as it arrived.
	DefaultGrace = time.Second
	// ReserveAnswer is how long a reserve connection may have a request in
	// progress and still be spared when the full reserve needs room: a
	// health check is answered in far less, and a connection still busy
	// after it is a slow or refused one (net/http lingers on a refused
	// request whose body was not read).
	ReserveAnswer = 50 * time.Millisecond
	// DefaultReserveLifetime bounds a reserve connection: every read and
	// write on it has this deadline from its accept, whatever the server
	// sets, so a slow client cannot keep a reserve slot.
	DefaultReserveLifetime = 5 * time.Second
	// DefaultGoodbyeWait is how long an evicted connection's goodbye
	// (SetGoodbye) may take before the listener closes the connection
	// itself.
	DefaultGoodbyeWait = time.Second
)

// Config is a Listener's limits.
type Config struct {
	// Max is how many connections are served in full at once; at least 1.
	Max int
	// Reserve is how many connections beyond Max may be open at once to be
	// served health checks only (Listener.Reserve); 0 means none.
	Reserve int
	// Grace is how long a connection without a request in progress is
	// kept after it opened or its last request ended before it counts as
	// idle; 0 means DefaultGrace.
	Grace time.Duration
	// ReserveLifetime is how long a reserve connection may stay open; 0
	// means DefaultReserveLifetime.
	ReserveLifetime time.Duration
	// GoodbyeWait bounds an evicted connection's goodbye: the listener
	// closes the connection this long after eviction whatever the goodbye
	// did; 0 means DefaultGoodbyeWait.
	GoodbyeWait time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Stats counts what a Listener has done since it was made.
type Stats struct {
	Open, Reserved int    // connections open now, in full and in the reserve
	Evicted        uint64 // idle connections closed to make room
	Refused        uint64 // new connections closed because nothing could make room
}

// Listener is a net.Listener whose Accept applies the limits of its Config
// (see the package comment). It is safe for concurrent use.
type Listener struct {
	inner   net.Listener
	cfg     Config
	reserve *reserveListener

	mu     sync.Mutex
	full   map[*Conn]struct{}
	spare  map[*Conn]struct{} // the reserve's connections
	byAddr map[string]*Conn   // every open connection by its remote address

	evicted, refused atomic.Uint64
	closeOnce        sync.Once
	closed           chan struct{}
}

// New returns a Listener of ln's connections with limits cfg.
func New(ln net.Listener, cfg Config) (*Listener, error) {
	if cfg.Max < 1 {
		return nil, errors.New("connlimit: Config.Max must be at least 1")
	}
	if cfg.Reserve < 0 {
		return nil, errors.New("connlimit: Config.Reserve must not be negative")
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.ReserveLifetime <= 0 {
		cfg.ReserveLifetime = DefaultReserveLifetime
	}
	if cfg.GoodbyeWait <= 0 {
		cfg.GoodbyeWait = DefaultGoodbyeWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Listener{inner: ln, cfg: cfg, full: map[*Conn]struct{}{}, spare: map[*Conn]struct{}{},
		byAddr: map[string]*Conn{}, closed: make(chan struct{})}
	l.reserve = &reserveListener{l: l, conns: make(chan *Conn, cfg.Reserve)}
	return l, nil
}

// Accept returns the next connection to be served in full. Connections
// for the reserve are handed to Reserve's Accept meanwhile; those refused
// are closed.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.inner.Accept()
		if err != nil {
			return nil, err
		}
		c, victim := l.admit(nc)
		if victim != nil {
			l.end(victim)
		}
		switch {
		case c == nil:
			nc.Close()
		case c.reserve:
			select {
			case <-l.closed:
				c.Close()
			case l.reserve.conns <- c: // never blocks: it holds at most Reserve
			}
		default:
			return c, nil
		}
	}
}

// admit decides where nc goes: c is its Conn (nil: refused), victim a
// connection to close to make room for it (already forgotten here).
func (l *Listener) admit(nc net.Conn) (c, victim *Conn) {
	now := l.cfg.Now()
	c = &Conn{Conn: nc, l: l, key: nc.RemoteAddr().String(), evictable: now.Add(l.cfg.Grace)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.full) >= l.cfg.Max {
		victim = l.evict(l.full, now, true)
	}
	if len(l.full) < l.cfg.Max {
		l.full[c] = struct{}{}
		l.byAddr[c.key] = c
		return c, victim
	}
	if l.cfg.Reserve == 0 {
		l.refused.Add(1)
		return nil, nil
	}
	if len(l.spare) >= l.cfg.Reserve {
		// Reserve connections live a few seconds and serve one quick
		// answer: the oldest idle one goes, whatever its grace, else the
		// oldest busy for longer than a health check takes.
		if victim = l.evict(l.spare, now, false); victim == nil {
			victim = l.evictSlow(now)
		}
		if victim == nil {
			l.refused.Add(1)
			return nil, nil
		}
	}
	c.reserve = true
	c.expires = now.Add(l.cfg.ReserveLifetime)
	nc.SetDeadline(c.expires)
	l.spare[c] = struct{}{}
	l.byAddr[c.key] = c
	return c, victim
}

// end closes victim, which eviction forgot: at once, or through its goodbye
// on a goroutine of its own, closing it GoodbyeWait later in any case so
// that a goodbye stuck writing to a peer that reads nothing ends too.
func (l *Listener) end(victim *Conn) {
	l.mu.Lock()
	goodbye := victim.goodbye
	l.mu.Unlock()
	if goodbye == nil {
		victim.Conn.Close()
		return
	}
	time.AfterFunc(l.cfg.GoodbyeWait, func() { victim.Conn.Close() })
	go goodbye()
}

// evict forgets and returns the connection of set idle longest, or nil if
// every one has a request in progress (or, with grace, is within its
// grace). Caller holds mu.
func (l *Listener) evict(set map[*Conn]struct{}, now time.Time, grace bool) *Conn {
	var victim *Conn
	for c := range set {
		if c.busy || (grace && c.evictable.After(now)) {
			continue
		}
		if victim == nil || c.evictable.Before(victim.evictable) {
			victim = c
		}
	}
	if victim != nil {
		l.forget(victim)
		l.evicted.Add(1)
	}
	return victim
}

// evictSlow forgets and returns the reserve connection opened longest ago
// if that was more than ReserveAnswer ago, else nil. Caller holds mu.
func (l *Listener) evictSlow(now time.Time) *Conn {
	var victim *Conn
	for c := range l.spare {
		if victim == nil || c.expires.Before(victim.expires) {
			victim = c
		}
	}
	if victim == nil || now.Sub(victim.expires.Add(-l.cfg.ReserveLifetime)) <= ReserveAnswer {
		return nil
	}
	l.forget(victim)
	l.evicted.Add(1)
	return victim
}

// forget drops c from the books. Caller holds mu.
func (l *Listener) forget(c *Conn) {
	if c.gone {
		return
	}
	c.gone = true
	delete(l.full, c)
	delete(l.spare, c)
	if l.byAddr[c.key] == c {
		delete(l.byAddr, c.key)
	}
}

// SetBusy records whether the connection c has a request in progress: the
// server calls it as each connection's first request begins (true) and its
// last open one ends (false). c is a connection Accept or Reserve().Accept
// returned, or a wrapper of one with a NetConn method (as *tls.Conn has);
// any other is ignored.
func (l *Listener) SetBusy(c net.Conn, busy bool) {
	tc := find(c)
	if tc == nil || tc.l != l {
		return
	}
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if busy == tc.busy {
		return
	}
	tc.busy = busy
	if !busy {
		tc.evictable = now.Add(l.cfg.Grace)
	}
}

// SetGoodbye registers how the server ends c when the listener evicts it:
// goodbye tells c's peer that no new request will be taken on c (HTTP/2's
// GOAWAY), so that a request the peer sends meanwhile is known not to have
// run, and closes c. Without one, eviction closes c at once. c is as for
// SetBusy.
func (l *Listener) SetGoodbye(c net.Conn, goodbye func()) {
	tc := find(c)
	if tc == nil || tc.l != l {
		return
	}
	l.mu.Lock()
	tc.goodbye = goodbye
	l.mu.Unlock()
}

// find returns the *Conn under c, unwrapping NetConn methods.
func find(c net.Conn) *Conn {
	for c != nil {
		switch x := c.(type) {
		case *Conn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// Lookup returns the open connection whose remote address is addr, or nil:
// for servers that report a connection by its address (grpc-go's
// stats.ConnTagInfo), not by the net.Conn.
func (l *Listener) Lookup(addr net.Addr) net.Conn {
	if addr == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.byAddr[addr.String()]; ok {
		return c
	}
	return nil
}

// Reserve returns the listener of reserve connections: serve it with a
// server that answers health checks only. Closing it closes l.
func (l *Listener) Reserve() net.Listener { return l.reserve }

// Close closes the listener (connections stay open); Accept and Reserve's
// Accept then fail with net.ErrClosed.
func (l *Listener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.closed)
		err = l.inner.Close()
		for {
			select {
			case c := <-l.reserve.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return err
}

// Addr is the listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// Stats returns the counts so far.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: len(l.full), Reserved: len(l.spare), Evicted: l.evicted.Load(), Refused: l.refused.Load()}
}

// Conn is an accepted connection; closing it frees its place.
type Conn struct {
	net.Conn
	l       *Listener
	key     string    // remote address
	reserve bool      // a reserve connection
	expires time.Time // reserve: every deadline is at most this

	// Guarded by l.mu.
	busy      bool
	evictable time.Time // when its grace after its last request (or its opening) ends
	gone      bool      // forgotten: closed, or evicted
	goodbye   func()    // how the server ends it when evicted, or nil
}

// Close closes the connection and frees its place.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	c.l.forget(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// NetConn returns the connection c wraps.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// PlainConn returns the connection c wraps, which its bytes reach
// unchanged: package writev writes there, with writev, rather than one
// buffer a call through c.
func (c *Conn) PlainConn() net.Conn { return c.Conn }

// Reserved reports whether c is a reserve connection (health checks only).
func (c *Conn) Reserved() bool { return c.reserve }

// SetDeadline, SetReadDeadline and SetWriteDeadline keep a reserve
// connection's deadlines within its lifetime.
func (c *Conn) SetDeadline(t time.Time) error { return c.Conn.SetDeadline(c.clamp(t)) }

func (c *Conn) SetReadDeadline(t time.Time) error { return c.Conn.SetReadDeadline(c.clamp(t)) }

func (c *Conn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.clamp(t)) }

func (c *Conn) clamp(t time.Time) time.Time {
	if c.reserve && (t.IsZero() || t.After(c.expires)) {
		return c.expires
	}
	return t
}

// reserveListener hands out the reserve connections Accept admitted.
type reserveListener struct {
	l     *Listener
	conns chan *Conn
}

func (r *reserveListener) Accept() (net.Conn, error) {
	select {
	case c := <-r.conns:
		return c, nil
	case <-r.l.closed:
		return nil, net.ErrClosed
	}
}

func (r *reserveListener) Close() error   { return r.l.Close() }
func (r *reserveListener) Addr() net.Addr { return r.l.Addr() }
