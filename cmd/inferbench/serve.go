package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"runtime/pprof"
	rtrace "runtime/trace"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/inferbench/inferbench/inference"
	_ "github.com/inferbench/inferbench/inference/cuda" // registers the "cuda" back-end
	_ "github.com/inferbench/inferbench/inference/nop"  // registers the "nop" back-end
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/trace"
	"github.com/inferbench/inferbench/internal/busyread"
	"github.com/inferbench/inferbench/internal/connlimit"
	"github.com/inferbench/inferbench/internal/ratelog"
)

// serve runs the server until ctx ends, then drains:
//
//  1. listen on the HTTP, gRPC and metrics addresses, so that one that
//     cannot be listened on stops the command before the model loads;
//  2. build the model and the inference server (warm-up, logged in parts),
//     then log each address;
//  3. serve until ctx ends (SIGINT/SIGTERM) or a listener fails;
//  4. drain: readiness false at once, -drain-delay of serving while not
//     ready, then stop accepting, answer every accepted request, stop the
//     inference server, all within -grace; exit 0, or 1 if grace ran out.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	log := newLogger(f.logFormat, stderr)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(f.gcPercent)
	}

	cfg, err := f.config()
	if err != nil {
		return err
	}
	// Listen first, so that an address that cannot be listened on is found
	// before the model loads; connections wait in the backlog until serving.
	lns, err := f.listen(cfg.IdlePoll)
	if err != nil {
		return err
	}
	srv, err := inference.New(cfg)
	if err != nil {
		lns.close()
		return err
	}
	logWarmup(log, srv)
	model, err := protocol.NewModel(srv, protocol.ModelConfig{
		Name: f.modelName, Version: f.modelVersion, Normalization: f.norm, InflightBytes: f.inflightBytes,
	})
	if err != nil {
		lns.close()
		srv.Close()
		return err
	}
	svc := protocol.New(model, protocol.Options{Log: log, Version: buildVersion(), MaxBodyBytes: f.maxBody, SharedMemory: f.sharedMemory(),
		Requests: protocol.RequestLimits{MaxIDBytes: f.maxIDBytes}})

	stopProfile, err := startProfiles(f.cpuProfile, f.execTrace)
	if err != nil {
		lns.close()
		srv.Close()
		return err
	}
	door, err := f.servers(svc, lns, log)
	if err != nil {
		stopProfile()
		lns.close()
		srv.Close()
		return err
	}

	failed := make(chan error, 5)
	var serving sync.WaitGroup
	start := func(name string, ln net.Listener, serveFn func(net.Listener) error) {
		if ln == nil {
			return
		}
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := serveFn(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) {
				failed <- fmt.Errorf("%s server: %w", name, err)
			}
		}()
	}
	for _, x := range []struct {
		name string
		ln   net.Listener
	}{{"http", lns.http}, {"grpc", lns.grpc}, {"metrics", lns.metrics}} {
		if x.ln != nil {
			log.Info("listening", "protocol", x.name, "addr", x.ln.Addr().String(), "tls", f.tlsCert != nil && x.name != "metrics")
		}
	}
	start("http", lns.http, door.http.Serve)
	start("http health", lns.httpHealth, door.httpHealth.Serve)
	start("grpc", lns.grpc, door.grpc.Serve)
	start("grpc health", lns.grpcHealth, door.grpcHealth.Serve)
	start("metrics", lns.metrics, door.metrics.Serve)
	log.Info("serving", "model", f.modelName, "version", f.modelVersion, "weights", srv.Weights(), "max_body_bytes", svc.MaxBodyBytes(), "grpc_server", f.grpcServer)

	var cause error
	select {
	case <-ctx.Done():
		log.Info("draining: not ready, answering accepted requests", "grace", f.grace, "drain_delay", f.drainDelay)
	case cause = <-failed:
		log.Error("stopping", "err", cause)
	}
	err = drain(f, log, svc, srv, door)
	serving.Wait()
	if perr := stopProfile(); perr != nil {
		err = errors.Join(err, perr)
	} else {
		for _, p := range [][2]string{{"cpu profile", f.cpuProfile}, {"execution trace", f.execTrace}} {
			if p[1] != "" {
				log.Info(p[0]+" written", "file", p[1])
			}
		}
	}
	if tr := cfg.Trace; tr != nil {
		if werr := tr.WriteFile(f.tracePath); werr != nil {
			err = errors.Join(err, werr)
		} else {
			log.Info("trace written", "file", f.tracePath, "batches", tr.Len())
		}
	}
	if err == nil && cause == nil {
		log.Info("stopped")
	}
	return errors.Join(cause, err)
}

// drain stops everything within f.grace; an error says what was cut off.
func drain(f *serveFlags, log *slog.Logger, svc *protocol.Service, srv *inference.Server, door *frontDoor) error {
	svc.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), f.grace)
	defer cancel()
	select {
	case <-time.After(f.drainDelay):
	case <-ctx.Done():
	}
	var wg sync.WaitGroup
	var httpErr error
	shutdownHTTP := func(h *http.Server, err *error) {
		defer wg.Done()
		if e := h.Shutdown(ctx); e != nil {
			h.Close()
			if err != nil {
				*err = e
			}
		}
	}
	stopGRPC := func(g protocol.GRPCServer) {
		defer wg.Done()
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			g.Stop()
			<-done
		}
	}
	wg.Add(4)
	go shutdownHTTP(door.http, &httpErr)
	go shutdownHTTP(door.httpHealth, nil)
	go stopGRPC(door.grpc)
	go stopGRPC(door.grpcHealth)
	wg.Wait()
	if err := svc.Close(); err != nil {
		log.Error("closing the front door", "err", err)
	}
	st := srv.Stats()
	srvErr := srv.Shutdown(ctx)
	mctx, mcancel := context.WithTimeout(context.Background(), time.Second)
	door.metrics.Shutdown(mctx)
	mcancel()
	if ctx.Err() != nil {
		return fmt.Errorf("grace period of %v ran out before every accepted request was answered (%d queued at the time): %w", f.grace, st.Queued, errors.Join(httpErr, srvErr, ctx.Err()))
	}
	return srvErr
}

// config is the inference.Config the flags describe.
func (f *serveFlags) config() (inference.Config, error) {
	c := f.cfg
	if f.tracePath != "" {
		c.Trace = trace.New()
	}
	return c, nil
}

// listeners are serve's: each of HTTP and gRPC has one for the servers
// serving everything and one for its connlimit reserve, served health
// checks only (nil without -max-conns); conns are their limits, which the
// servers tell which connections are busy (nil entries without).
type listeners struct {
	http, grpc, metrics    net.Listener
	httpHealth, grpcHealth net.Listener
	conns                  struct{ http, grpc, metrics *connlimit.Listener }
}

// listen opens every configured address. With -max-conns, each takes that
// many connections in full and -health-conns more for health checks only
// (package connlimit); with -tls-cert, HTTP and gRPC speak TLS. With poll
// (-idle-poll) above 0, reads of the HTTP and gRPC connections look for up
// to poll before they sleep (busyread).
func (f *serveFlags) listen(poll time.Duration) (*listeners, error) {
	var l listeners
	open := func(addr string, poll time.Duration, reserve int, alpn []string, main, health *net.Listener, lim **connlimit.Listener) error {
		if addr == "" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		*main = busyread.Listener(ln, poll)
		if f.maxConns > 0 {
			cl, err := connlimit.New(*main, connlimit.Config{Max: f.maxConns, Reserve: reserve})
			if err != nil {
				ln.Close()
				return err
			}
			*lim, *main = cl, cl
			if reserve > 0 {
				*health = cl.Reserve()
			}
		}
		if f.tlsCert != nil && alpn != nil {
			*main = tls.NewListener(*main, f.tlsConfig(alpn...))
			if *health != nil {
				*health = tls.NewListener(*health, f.tlsConfig(alpn...))
			}
		}
		return nil
	}
	for _, x := range []struct {
		flag, addr   string
		poll         time.Duration
		reserve      int
		alpn         []string
		main, health *net.Listener
		lim          **connlimit.Listener
	}{
		{"-http-addr", f.httpAddr, poll, f.healthConns, []string{"h2", "http/1.1"}, &l.http, &l.httpHealth, &l.conns.http},
		{"-grpc-addr", f.grpcAddr, poll, f.healthConns, []string{"h2"}, &l.grpc, &l.grpcHealth, &l.conns.grpc},
		{"-metrics-addr", f.metricsAddr, 0, 0, nil, &l.metrics, new(net.Listener), &l.conns.metrics},
	} {
		if err := open(x.addr, x.poll, x.reserve, x.alpn, x.main, x.health, x.lim); err != nil {
			l.close()
			return nil, fmt.Errorf("%s %q: %w", x.flag, x.addr, err)
		}
	}
	return &l, nil
}

func (l *listeners) close() {
	for _, ln := range []net.Listener{l.http, l.grpc, l.metrics} {
		if ln != nil {
			ln.Close()
		}
	}
}

// peerLogLines a peerLogPeriod bound the lines net/http may log about peers.
const (
	peerLogLines  = 10
	peerLogPeriod = time.Minute
)

// frontDoor is serve's servers: HTTP, gRPC, their health-only twins for
// the connlimit reserve, and metrics.
type frontDoor struct {
	http, httpHealth, metrics *http.Server
	grpc, grpcHealth          protocol.GRPCServer
}

// servers builds the servers of lns, each reporting to its listener's
// connection limit which connections are busy.
func (f *serveFlags) servers(svc *protocol.Service, lns *listeners, log *slog.Logger) (*frontDoor, error) {
	// What net/http logs is about a peer (a bad handshake, a malformed
	// request line), so a client could fill the log: rate-limited.
	errLog := slog.NewLogLogger(ratelog.New(log.Handler(), peerLogLines, peerLogPeriod), slog.LevelWarn)
	d := &frontDoor{
		http: &http.Server{
			Handler:           svc.HTTPHandler(),
			ReadHeaderTimeout: f.readHeaderTimeout,
			ReadTimeout:       f.readTimeout,
			WriteTimeout:      f.writeTimeout,
			IdleTimeout:       f.idleTimeout,
			MaxHeaderBytes:    f.maxHeaderBytes,
			ErrorLog:          errLog,
			ConnState:         connState(lns.conns.http),
		},
		// A reserve connection's deadlines end with its lifetime anyway.
		httpHealth: &http.Server{
			Handler:           svc.HealthHTTPHandler(),
			ReadHeaderTimeout: connlimit.DefaultReserveLifetime,
			MaxHeaderBytes:    healthMaxHeaderBytes,
			ErrorLog:          errLog,
			ConnState:         connState(lns.conns.http),
		},
		metrics: &http.Server{
			Handler: metricsHandler(svc), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
			ErrorLog:  errLog,
			ConnState: connState(lns.conns.metrics),
		},
	}
	d.httpHealth.SetKeepAlivesEnabled(false)
	limits := protocol.GRPCLimits{
		MaxMessageBytes: int(svc.MaxBodyBytes()), MaxStreams: uint32(f.grpcMaxStreams), IdleTimeout: f.idleTimeout,
		StreamWindow: int32(f.grpcWindow),
	}
	var grpcConns protocol.ConnTracker
	if lns.conns.grpc != nil {
		grpcConns = lns.conns.grpc
	}
	limits.Conns = grpcConns
	var err error
	if d.grpc, err = svc.NewGRPCServer(f.grpcServer, limits); err != nil {
		return nil, err
	}
	d.grpcHealth = svc.NewHealthGRPCServer(grpcConns)
	return d, nil
}

// healthMaxHeaderBytes bounds a health-only connection's request headers.
const healthMaxHeaderBytes = 8 << 10

// connState is an http.Server's ConnState hook telling lim (if set) when
// a connection starts and stops serving a request.
func connState(lim *connlimit.Listener) func(net.Conn, http.ConnState) {
	if lim == nil {
		return nil
	}
	return func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateActive:
			lim.SetBusy(c, true)
		case http.StateIdle:
			lim.SetBusy(c, false)
		}
	}
}

// tlsConfig is the listeners' TLS: -tls-cert's certificate, TLS 1.2 at
// least, offering the application protocols alpn.
func (f *serveFlags) tlsConfig(alpn ...string) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{*f.tlsCert}, MinVersion: tls.VersionTLS12, NextProtos: alpn}
}

// metricsHandler serves GET /metrics: the model's figures plus the Go
// runtime's and the process's; and GET /v2/health/live and /ready, so that
// probes have a port of their own that inference traffic does not use.
func metricsHandler(svc *protocol.Service) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(svc.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
	health := svc.HealthHTTPHandler()
	mux.Handle("GET /v2/health/live", health)
	mux.Handle("GET /v2/health/ready", health)
	return mux
}

func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// logWarmup logs the warm-up split: model, back-end set-up (with its parts)
// and the first inference.
func logWarmup(log *slog.Logger, srv *inference.Server) {
	w := srv.Warmup()
	attrs := []any{"load", w.Load, "setup", w.Setup, "first", w.First, "total", w.Total()}
	for _, p := range w.Parts {
		attrs = append(attrs, "setup."+p.Name, p.Time)
	}
	for _, kv := range srv.Info().Config {
		attrs = append(attrs, kv.Key, kv.Value)
	}
	log.Info("warm-up", attrs...)
}

// buildVersion is the server metadata's version: the module version, or the
// VCS revision of a development build.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	return "dev"
}

// startProfiles starts writing a CPU profile (-cpuprofile) and an execution
// trace (-exectrace) to their paths and returns the function that stops both
// and closes their files. An empty path records nothing.
func startProfiles(cpuPath, tracePath string) (stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var errs []error
		for _, s := range slices.Backward(stops) {
			errs = append(errs, s())
		}
		return errors.Join(errs...)
	}
	for _, p := range []struct {
		flag, path   string
		start        func(io.Writer) error
		stopRecorder func()
	}{
		{"-cpuprofile", cpuPath, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"-exectrace", tracePath, rtrace.Start, rtrace.Stop},
	} {
		if p.path == "" {
			continue
		}
		file, err := os.Create(p.path)
		if err == nil {
			if err = p.start(file); err != nil {
				file.Close()
			}
		}
		if err != nil {
			return nil, errors.Join(stop(), fmt.Errorf("%s: %w", p.flag, err))
		}
		stops = append(stops, func() error {
			p.stopRecorder()
			if err := file.Close(); err != nil {
				return fmt.Errorf("%s: %w", p.flag, err)
			}
			return nil
		})
	}
	return stop, nil
}
