package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/busyread"
	_ "github.com/inferbench/inferbench/inference/cuda" // registers the "cuda" back-end
	_ "github.com/inferbench/inferbench/inference/nop"  // registers the "nop" back-end
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/trace"
)

// serve runs the server until ctx ends, then drains:
//
//  1. build the model and the inference server (warm-up, logged in parts);
//  2. listen on the HTTP, gRPC and metrics addresses (one log line each);
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
	srv, err := inference.New(cfg)
	if err != nil {
		return err
	}
	logWarmup(log, srv)
	model, err := protocol.NewModel(srv, protocol.ModelConfig{
		Name: f.modelName, Version: f.modelVersion, Normalization: f.norm, InflightBytes: f.inflightBytes,
	})
	if err != nil {
		srv.Close()
		return err
	}
	svc := protocol.New(model, protocol.Options{Log: log, Version: buildVersion(), MaxBodyBytes: f.maxBody, SharedMemory: f.sharedMemory()})

	lns, err := f.listen(cfg.IdlePoll)
	if err != nil {
		srv.Close()
		return err
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		lns.close()
		srv.Close()
		return err
	}
	httpSrv := &http.Server{
		Handler:           svc.HTTPHandler(),
		ReadHeaderTimeout: f.readHeaderTimeout,
		ReadTimeout:       f.readTimeout,
		WriteTimeout:      f.writeTimeout,
		IdleTimeout:       f.idleTimeout,
		MaxHeaderBytes:    f.maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	grpcSrv, err := svc.NewGRPCServer(f.grpcServer, protocol.GRPCLimits{
		MaxMessageBytes: int(svc.MaxBodyBytes()), MaxStreams: uint32(f.grpcMaxStreams), IdleTimeout: f.idleTimeout,
		StreamWindow: int32(f.grpcWindow),
	})
	if err != nil {
		stopProfile()
		lns.close()
		srv.Close()
		return err
	}
	metricsSrv := &http.Server{Handler: metricsHandler(svc), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}

	failed := make(chan error, 3)
	var serving sync.WaitGroup
	start := func(name string, ln net.Listener, serveFn func(net.Listener) error) {
		if ln == nil {
			return
		}
		log.Info("listening", "protocol", name, "addr", ln.Addr().String())
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := serveFn(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				failed <- fmt.Errorf("%s server: %w", name, err)
			}
		}()
	}
	start("http", lns.http, httpSrv.Serve)
	start("grpc", lns.grpc, grpcSrv.Serve)
	start("metrics", lns.metrics, metricsSrv.Serve)
	log.Info("serving", "model", f.modelName, "version", f.modelVersion, "max_body_bytes", svc.MaxBodyBytes(), "grpc_server", f.grpcServer)

	var cause error
	select {
	case <-ctx.Done():
		log.Info("draining: not ready, answering accepted requests", "grace", f.grace, "drain_delay", f.drainDelay)
	case cause = <-failed:
		log.Error("stopping", "err", cause)
	}
	err = drain(f, log, svc, srv, httpSrv, grpcSrv, metricsSrv)
	serving.Wait()
	if perr := stopProfile(); perr != nil {
		err = errors.Join(err, perr)
	} else if f.cpuProfile != "" {
		log.Info("cpu profile written", "file", f.cpuProfile)
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
func drain(f *serveFlags, log *slog.Logger, svc *protocol.Service, srv *inference.Server, httpSrv *http.Server, grpcSrv protocol.GRPCServer, metricsSrv *http.Server) error {
	svc.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), f.grace)
	defer cancel()
	select {
	case <-time.After(f.drainDelay):
	case <-ctx.Done():
	}
	var wg sync.WaitGroup
	var httpErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		if httpErr = httpSrv.Shutdown(ctx); httpErr != nil {
			httpSrv.Close()
		}
	}()
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() { grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			grpcSrv.Stop()
			<-done
		}
	}()
	wg.Wait()
	if err := svc.Close(); err != nil {
		log.Error("closing the front door", "err", err)
	}
	st := srv.Stats()
	srvErr := srv.Shutdown(ctx)
	mctx, mcancel := context.WithTimeout(context.Background(), time.Second)
	metricsSrv.Shutdown(mctx)
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

type listeners struct{ http, grpc, metrics net.Listener }

// listen opens every configured address, each limited to f.maxConns
// connections. With poll (-idle-poll) above 0, reads of the HTTP and gRPC
// connections look for up to poll before they sleep (busyread).
func (f *serveFlags) listen(poll time.Duration) (*listeners, error) {
	var l listeners
	open := func(addr string, poll time.Duration) (net.Listener, error) {
		if addr == "" {
			return nil, nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		ln = busyread.Listener(ln, poll)
		if f.maxConns > 0 {
			ln = netutil.LimitListener(ln, f.maxConns)
		}
		return ln, nil
	}
	var err error
	for _, x := range []struct {
		addr string
		ln   *net.Listener
		poll time.Duration
	}{{f.httpAddr, &l.http, poll}, {f.grpcAddr, &l.grpc, poll}, {f.metricsAddr, &l.metrics, 0}} {
		if *x.ln, err = open(x.addr, x.poll); err != nil {
			l.close()
			return nil, err
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

// metricsHandler serves GET /metrics: the model's figures plus the Go
// runtime's and the process's.
func metricsHandler(svc *protocol.Service) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(svc.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: 4, Timeout: 10 * time.Second}))
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

// startCPUProfile starts writing a CPU profile to path and returns the
// function that stops it and closes the file. An empty path profiles nothing.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	file, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		file.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := file.Close(); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		return nil
	}, nil
}
