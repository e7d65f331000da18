package connlimit

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeConn is one end of a net.Pipe with an address of its own, recording
// whether it was closed and its last deadline.
type fakeConn struct {
	net.Conn
	addr     fakeAddr
	mu       sync.Mutex
	closed   bool
	deadline time.Time
}

type fakeAddr string

func (a fakeAddr) Network() string { return "fake" }
func (a fakeAddr) String() string  { return string(a) }

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }

func (c *fakeConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}

func (c *fakeConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

func (c *fakeConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// fakeListener accepts the conns sent on its channel.
type fakeListener struct {
	conns  chan net.Conn
	once   sync.Once
	closed chan struct{}
}

func newFakeListener() *fakeListener {
	return &fakeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *fakeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *fakeListener) Addr() net.Addr { return fakeAddr("listener") }

// rig is a Listener over a fakeListener with a clock the test moves.
type rig struct {
	t     *testing.T
	inner *fakeListener
	l     *Listener
	mu    sync.Mutex
	now   time.Time
	n     int
	full  chan net.Conn // what Accept returned
}

func newRig(t *testing.T, cfg Config) *rig {
	r := &rig{t: t, inner: newFakeListener(), now: time.Unix(1000, 0), full: make(chan net.Conn, 100)}
	cfg.Now = r.clock
	var err error
	r.l, err = New(r.inner, cfg)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := r.l.Accept()
			if err != nil {
				return
			}
			r.full <- c
		}
	}()
	t.Cleanup(func() {
		r.l.Close()
		<-done
	})
	return r
}

func (r *rig) clock() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *rig) advance(d time.Duration) {
	r.mu.Lock()
	r.now = r.now.Add(d)
	r.mu.Unlock()
}

// dial hands the listener a new connection and returns it.
func (r *rig) dial() *fakeConn {
	r.n++
	a, b := net.Pipe()
	r.t.Cleanup(func() { b.Close() })
	c := &fakeConn{Conn: a, addr: fakeAddr(fmt.Sprintf("10.0.0.1:%d", r.n))}
	r.inner.conns <- c
	return c
}

// accept dials and returns the Conn Accept gives for it.
func (r *rig) accept() (*fakeConn, net.Conn) {
	fc := r.dial()
	return fc, <-r.full
}

// acceptReserve dials and returns the Conn Reserve().Accept gives for it.
func (r *rig) acceptReserve() (*fakeConn, net.Conn) {
	fc := r.dial()
	c, err := r.l.Reserve().Accept()
	require.NoError(r.t, err)
	return fc, c
}

func TestNewRejectsBadLimits(t *testing.T) {
	for _, cfg := range []Config{{Max: 0}, {Max: 1, Reserve: -1}} {
		_, err := New(newFakeListener(), cfg)
		assert.Error(t, err, "%+v", cfg)
	}
}

// TestFullListenerEvictsTheIdleLongest: a new connection replaces the one
// idle longest; one with a request in progress, or new within its grace,
// is never closed.
func TestFullListenerEvictsTheIdleLongest(t *testing.T) {
	r := newRig(t, Config{Max: 3, Reserve: 1, Grace: time.Second})
	busy, busyC := r.accept()
	early, earlyC := r.accept()
	late, lateC := r.accept()
	r.l.SetBusy(busyC, true)
	r.l.SetBusy(earlyC, true)
	r.l.SetBusy(lateC, true)
	r.advance(time.Second)
	r.l.SetBusy(earlyC, false) // idle since t+1s
	r.advance(time.Second / 2)
	r.l.SetBusy(lateC, false) // idle since t+1.5s
	r.advance(time.Second / 2)

	_, c := r.accept()
	assert.True(t, early.isClosed(), "the connection idle longest made room")
	assert.False(t, late.isClosed(), "idle for less than its grace")
	assert.False(t, busy.isClosed(), "a connection with a request in progress stays")
	assert.Equal(t, Stats{Open: 3, Evicted: 1}, r.l.Stats())

	_, rc := r.acceptReserve()
	assert.True(t, rc.(*Conn).Reserved(), "nothing idle for its grace: the reserve")
	r.advance(time.Second / 2)
	_, _ = r.accept()
	assert.True(t, late.isClosed())
	assert.False(t, busy.isClosed())
	assert.Equal(t, Stats{Open: 3, Reserved: 1, Evicted: 2}, r.l.Stats())
	assert.False(t, c.(*Conn).Reserved())
}

// TestNewConnectionsWithoutRequestsCountIdleAfterTheirGrace: a client that
// connects and sends nothing holds its place only for the grace period.
func TestNewConnectionsWithoutRequestsCountIdleAfterTheirGrace(t *testing.T) {
	r := newRig(t, Config{Max: 2, Reserve: 2, Grace: time.Second})
	silent1, _ := r.accept()
	r.advance(time.Millisecond)
	silent2, _ := r.accept()
	_, c := r.acceptReserve()
	assert.True(t, c.(*Conn).Reserved(), "within the grace nothing is idle: the reserve")
	assert.False(t, silent1.isClosed())
	r.advance(time.Second)
	_, c = r.accept()
	assert.False(t, c.(*Conn).Reserved())
	assert.True(t, silent1.isClosed(), "past its grace, the oldest silent connection made room")
	assert.False(t, silent2.isClosed())
}

// TestReserveTakesWhatTheFullSetCannot: when every full place has a request
// in progress, new connections go to the reserve, whose deadlines never
// pass its lifetime; a full reserve drops its oldest idle one; when every
// connection is busy, the newcomer is closed.
func TestReserveTakesWhatTheFullSetCannot(t *testing.T) {
	r := newRig(t, Config{Max: 1, Reserve: 2, ReserveLifetime: 5 * time.Second})
	_, fullC := r.accept()
	r.l.SetBusy(fullC, true)

	first, c1 := r.acceptReserve()
	start := r.clock()
	assert.Equal(t, start.Add(5*time.Second), first.deadline, "a reserve connection's deadline is set at accept")
	require.NoError(t, c1.SetDeadline(time.Time{}))
	assert.Equal(t, start.Add(5*time.Second), first.deadline, "no deadline is none past the lifetime")
	require.NoError(t, c1.SetDeadline(start.Add(time.Hour)))
	assert.Equal(t, start.Add(5*time.Second), first.deadline)
	require.NoError(t, c1.SetDeadline(start.Add(time.Second)))
	assert.Equal(t, start.Add(time.Second), first.deadline, "an earlier deadline stands")

	r.advance(time.Millisecond)
	second, c2 := r.acceptReserve()
	r.l.SetBusy(c2, true)
	r.advance(time.Millisecond)
	_, c3 := r.acceptReserve()
	assert.True(t, first.isClosed(), "the full reserve dropped its oldest idle connection")
	assert.False(t, second.isClosed(), "not one answering a request")
	assert.Equal(t, Stats{Open: 1, Reserved: 2, Evicted: 1}, r.l.Stats())

	r.l.SetBusy(c3, true)
	refused := r.dial()
	require.Eventually(t, refused.isClosed, 10*time.Second, time.Millisecond, "nothing can make room: closed at once")
	assert.Equal(t, uint64(1), r.l.Stats().Refused)

	// A reserve connection busy for longer than a health check takes (a
	// refused request lingering, a slow one) makes room.
	r.advance(ReserveAnswer)
	_, c5 := r.acceptReserve()
	assert.True(t, second.isClosed(), "the reserve connection busy longest went")
	r.l.SetBusy(c5, true)
	assert.Equal(t, uint64(2), r.l.Stats().Evicted)
	c2 = c3 // c2 was closed by the eviction; c3 is the one left to close below

	// A connection closed by the server frees its place.
	require.NoError(t, c2.Close())
	_, c4 := r.acceptReserve()
	assert.True(t, c4.(*Conn).Reserved())
}

func TestNoReserveRefusesWhenFull(t *testing.T) {
	r := newRig(t, Config{Max: 1})
	_, c := r.accept()
	r.l.SetBusy(c, true)
	refused := r.dial()
	require.Eventually(t, refused.isClosed, 10*time.Second, time.Millisecond)
	assert.Equal(t, Stats{Open: 1, Refused: 1}, r.l.Stats())
}

// TestSetBusyAndLookupFindWrappedConns: a connection is found through a
// wrapper's NetConn (as *tls.Conn has) and by its remote address.
func TestSetBusyAndLookupFindWrappedConns(t *testing.T) {
	r := newRig(t, Config{Max: 1, Reserve: 1})
	fc, c := r.accept()
	assert.Same(t, c, r.l.Lookup(fc.addr))
	assert.Nil(t, r.l.Lookup(fakeAddr("10.9.9.9:1")))
	assert.Nil(t, r.l.Lookup(nil))
	r.l.SetBusy(wrapper{c}, true)
	r.l.SetBusy(fc, true) // not one of the Listener's: ignored
	r.advance(time.Hour)
	_, rc := r.acceptReserve()
	assert.True(t, rc.(*Conn).Reserved(), "the busy connection was not evicted")
	assert.False(t, fc.isClosed())
	require.NoError(t, c.Close())
	assert.Nil(t, r.l.Lookup(fc.addr), "forgotten once closed")
}

type wrapper struct{ net.Conn }

func (w wrapper) NetConn() net.Conn { return w.Conn }

func TestCloseEndsBothAccepts(t *testing.T) {
	inner := newFakeListener()
	l, err := New(inner, Config{Max: 1, Reserve: 1})
	require.NoError(t, err)
	errs := make(chan error, 2)
	go func() { _, err := l.Accept(); errs <- err }()
	go func() { _, err := l.Reserve().Accept(); errs <- err }()
	require.NoError(t, l.Reserve().Close())
	for range 2 {
		assert.ErrorIs(t, <-errs, net.ErrClosed)
	}
	r := newRig(t, Config{Max: 1, Reserve: 1})
	assert.Equal(t, fakeAddr("listener"), r.l.Reserve().Addr())
}

// TestEvictionSaysGoodbye: a connection the server gave a goodbye is ended
// by it when evicted, and closed GoodbyeWait later if the goodbye does not
// close it; the listener never waits for a goodbye.
func TestEvictionSaysGoodbye(t *testing.T) {
	t.Run("the goodbye closes", func(t *testing.T) {
		r := newRig(t, Config{Max: 1, Grace: time.Second, GoodbyeWait: time.Hour})
		first, firstC := r.accept()
		said := make(chan struct{})
		r.l.SetGoodbye(firstC, func() {
			close(said)
			firstC.Close()
		})
		r.advance(time.Second)
		_, _ = r.accept()
		select {
		case <-said:
		case <-time.After(10 * time.Second):
			t.Fatal("no goodbye")
		}
		assert.True(t, first.isClosed())
		assert.Equal(t, Stats{Open: 1, Evicted: 1}, r.l.Stats())
	})
	t.Run("a stuck goodbye", func(t *testing.T) {
		r := newRig(t, Config{Max: 1, Grace: time.Second, GoodbyeWait: 10 * time.Millisecond})
		first, firstC := r.accept()
		stuck := make(chan struct{})
		t.Cleanup(func() { close(stuck) })
		r.l.SetGoodbye(firstC, func() { <-stuck })
		r.advance(time.Second)
		_, _ = r.accept() // returns although the goodbye has not
		require.Eventually(t, first.isClosed, 10*time.Second, time.Millisecond, "closed after GoodbyeWait")
	})
	t.Run("another listener's connection", func(t *testing.T) {
		r := newRig(t, Config{Max: 1, Grace: time.Second})
		other := newRig(t, Config{Max: 1})
		first, firstC := r.accept()
		other.l.SetGoodbye(firstC, func() { t.Error("the goodbye of a listener that does not hold the connection") })
		r.advance(time.Second)
		_, _ = r.accept()
		assert.True(t, first.isClosed(), "no goodbye of its own: closed at once")
	})
}
