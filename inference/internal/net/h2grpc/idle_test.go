package h2grpc

import (
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// pipeListener hands out the server ends of in-memory connections.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// pipePeer is a client on an in-memory connection to a server with o,
// both inside the caller's synctest bubble; every frame the server sends
// goes to frames, read by a goroutine of its own (net.Pipe does not
// buffer: the server's writes wait for a reader). The server stops with
// the bubble's test.
type pipePeer struct {
	*rawPeer
	frames chan http2.Frame // closed when the connection ends
}

func servePipe(t *testing.T, o ServerOptions) *pipePeer {
	s := NewServer(o)
	v2pb.RegisterGRPCInferenceServiceServer(s, &echo{})
	ln := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	client, server := net.Pipe()
	ln.conns <- server
	p := &pipePeer{rawPeer: newRawPeer(t, client), frames: make(chan http2.Frame, 1000)}
	go func() {
		defer close(p.frames)
		for {
			f, err := p.fr.ReadFrame()
			if err != nil {
				return
			}
			p.frames <- f
		}
	}()
	_, err := io.WriteString(client, preface)
	require.NoError(t, err)
	require.NoError(t, p.fr.WriteSettings())
	t.Cleanup(func() {
		client.Close()
		s.Stop()
		<-served
	})
	return p
}

// goAway returns the GOAWAY the server has sent, if any, once every
// goroutine of the bubble waits, and whether the connection has ended.
func (p *pipePeer) goAway(t *testing.T) (g *http2.GoAwayFrame, ended bool) {
	synctest.Wait()
	for {
		select {
		case f, ok := <-p.frames:
			if !ok {
				return g, true
			}
			if ga, ok := f.(*http2.GoAwayFrame); ok {
				g = ga
			}
		default:
			return g, false
		}
	}
}

// A connection's idle time counts from its last request, not its last
// frame: a client that PINGs every 20 s (as often as the server allows) is
// told to go away (GOAWAY NO_ERROR) and disconnected IdleTimeout after its
// last call ended.
func TestIdleTimeCountsFromTheLastRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 5 * time.Minute
		p := servePipe(t, ServerOptions{IdleTimeout: idle, MinPingInterval: 10 * time.Second, PermitPingWithoutCalls: true})
		start := time.Now()
		msg, err := proto.Marshal(&v2pb.ModelInferRequest{Id: "x"})
		require.NoError(t, err)
		var callEnded time.Duration
		for i := 0; time.Since(start) < 30*time.Minute; i++ {
			time.Sleep(20 * time.Second)
			if time.Since(start) == 3*time.Minute {
				p.headers(1, inferMethod, false)
				p.message(1, msg, true)
				synctest.Wait()
				callEnded = time.Since(start)
			}
			if g, ended := p.goAway(t); g != nil || ended {
				require.NotNil(t, g, "a GOAWAY before the end")
				assert.Equal(t, http2.ErrCodeNo, g.ErrCode)
				assert.True(t, ended, "connection closed after its GOAWAY")
				assert.Equal(t, callEnded+idle, time.Since(start).Truncate(20*time.Second), "idle since the call ended")
				return
			}
			require.NoError(t, p.fr.WritePing(false, [8]byte{byte(i)}))
		}
		t.Fatalf("connection still open after %v of PINGs every 20 s", time.Since(start))
	})
}

// PINGs are held to grpc-go's keepalive enforcement: more often than
// MinPingInterval with calls running, or at all without calls unless
// permitted, is a strike, and the third strike ends the connection with
// GOAWAY ENHANCE_YOUR_CALM "too_many_pings". Within the policy, PINGs go on
// being answered.
func TestPingsMoreOftenThanThePolicyEndTheConnection(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     ServerOptions
		every    time.Duration
		call     bool // a call runs meanwhile
		goesAway bool
	}{
		{"every minute, no call", ServerOptions{}, time.Minute, false, true},
		{"every minute, a call running", ServerOptions{}, time.Minute, true, true},
		{"every 5 minutes, a call running", ServerOptions{}, 5 * time.Minute, true, false},
		{"every 5 minutes, no call", ServerOptions{}, 5 * time.Minute, false, true},
		{"every 5 minutes, no call, permitted", ServerOptions{PermitPingWithoutCalls: true}, 5 * time.Minute, false, false},
		{"every 10 s, MinPingInterval 10 s", ServerOptions{MinPingInterval: 10 * time.Second}, 10 * time.Second, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				o := tc.opts
				o.IdleTimeout = 24 * time.Hour
				p := servePipe(t, o)
				if tc.call {
					slow, err := proto.Marshal(&v2pb.ModelInferRequest{ModelName: "slow"})
					require.NoError(t, err)
					p.headers(1, inferMethod, false)
					p.message(1, slow, false)
				}
				for i := range 10 {
					time.Sleep(tc.every)
					if err := p.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
						break // closed
					}
					synctest.Wait()
				}
				g, ended := p.goAway(t)
				if !tc.goesAway {
					assert.Nil(t, g, "GOAWAY")
					assert.False(t, ended, "connection ended")
					return
				}
				require.NotNil(t, g, "GOAWAY")
				assert.Equal(t, http2.ErrCodeEnhanceYourCalm, g.ErrCode)
				assert.Equal(t, "too_many_pings", string(g.DebugData()))
				assert.True(t, ended, "connection ended")
			})
		})
	}
}

// OnConn's goodbye ends a connection politely: an idle one gets a GOAWAY
// (NO_ERROR, no stream run, "too many connections") and is closed; one with
// a call in progress gets a GOAWAY naming that call, which still completes
// before the connection closes.
func TestGoodbyeEndsAConnectionPolitely(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "call in progress"}[busy], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bye := make(chan func(), 1)
				p := servePipe(t, ServerOptions{OnConn: func(_ net.Conn, goodbye func()) { bye <- goodbye }})
				synctest.Wait()
				require.Len(t, bye, 1, "OnConn was told of the connection")
				if busy {
					p.headers(1, inferMethod, false)
					synctest.Wait()
				}
				(<-bye)()
				g, ended := p.goAway(t)
				require.NotNil(t, g, "a GOAWAY")
				assert.Equal(t, http2.ErrCodeNo, g.ErrCode)
				assert.Equal(t, "too many connections", string(g.DebugData()))
				if !busy {
					assert.Equal(t, uint32(0), g.LastStreamID)
					assert.True(t, ended, "an idle connection closes after its GOAWAY")
					return
				}
				assert.Equal(t, uint32(1), g.LastStreamID, "the call in progress may finish")
				assert.False(t, ended, "open while its call runs")
				msg, err := proto.Marshal(&v2pb.ModelInferRequest{Id: "x"})
				require.NoError(t, err)
				p.message(1, msg, true)
				synctest.Wait()
				var trailer bool
				for f := range p.frames {
					if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamEnded() {
						trailer = trailer || headerValue(h, "grpc-status") == "0"
					}
				}
				assert.True(t, trailer, "the call was answered with status OK before the connection closed")
			})
		})
	}
}
