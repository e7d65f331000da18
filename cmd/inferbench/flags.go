package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/internal/serverflag"
)

// Defaults of serve's front-door flags.
const (
	// defaultTimeout is -timeout: with the reject policy, every request is
	// answered within it (plus its batch's compute time) at any overload.
	defaultTimeout = 30 * time.Second
	// defaultHealthConns is -health-conns.
	defaultHealthConns = 16
)

// serveFlags are serve's settings: one flag per inference.Config field, and
// the front door's.
type serveFlags struct {
	cfg    inference.Config
	shared serverflag.Flags // the flags the suite takes too

	modelName, modelVersion               string
	httpAddr, grpcAddr, metricsAddr       string
	grace, drainDelay                     time.Duration
	maxBody                               int64
	readHeaderTimeout, readTimeout        time.Duration
	writeTimeout, idleTimeout             time.Duration
	maxHeaderBytes, maxConns, healthConns int
	tlsCertFile, tlsKeyFile               string
	tlsCert                               *tls.Certificate // loaded by check
	grpcMaxStreams                        uint
	grpcServer                            string
	grpcWindow                            int64
	inflightBytes                         int64
	shm                                   bool
	shmMaxRegions                         int
	shmMaxBytes                           int64
	maxIDBytes                            int
	shmKeyPrefix, shmHeader               string
	shmHeaderName, shmHeaderValue         string // -shm-header parsed
	norm                                  protocol.Normalization
	tracePath, cpuProfile, execTrace      string
	logFormat                             string
	gcPercent                             int
	pipeline, precision, queuePolicy      string
	devices, batches, preferred           string
	uint8Mean, uint8Std                   string
}

// parseServe reads serve's flags; every bad value names its flag and rule.
func parseServe(args []string, stderr io.Writer) (*serveFlags, error) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("inferbench serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &f.cfg
	// The model and the back-end (inference.Config).
	f.shared.Register(fs, "", "")
	serverflag.Backend.String(fs, &c.BackendName, "cpu", "")
	serverflag.Workers.Int(fs, &c.Workers, 1, "")
	serverflag.Pipeline.String(fs, &f.pipeline, "serial", "")
	fs.IntVar(&c.Slots, "slots", 0, "batches in flight per worker (0: 1 for serial, 3 for overlap)")
	serverflag.Precision.String(fs, &f.precision, "fp32", "")
	serverflag.Graphs.Bool(fs, &c.Graphs, false, "")
	serverflag.Devices.String(fs, &f.devices, "0", "their ordinals, comma-separated")
	serverflag.PinnedInput.Bool(fs, &c.PinnedInput, true, "the front door decodes requests there (false: make the buffers anyway)")
	fs.IntVar(&c.MaxBatch, "max-batch", inference.DefaultMaxBatch, "largest batch of one request (and of a merged batch)")
	serverflag.Batches.String(fs, &f.batches, "1", "comma-separated")
	fs.IntVar(&c.MaxQueue, "max-queue", inference.DefaultMaxQueue, "requests waiting for a worker at most")
	fs.StringVar(&f.queuePolicy, "queue-policy", "reject", "when the queue or -inflight-bytes is full: reject (503 with Retry-After / RESOURCE_EXHAUSTED at once) or block (wait, up to the request's deadline; the wait for -inflight-bytes is bounded only by the client's own deadline)")
	fs.DurationVar(&c.Timeout, "timeout", defaultTimeout, "deadline of a request from its arrival: one still queued then is answered 504 / DEADLINE_EXCEEDED, one computing when it passes as soon as its batch ends (0: none; the request's \"timeout\" parameter or a gRPC deadline may shorten it)")
	fs.BoolVar(&c.RejectNonFinite, "reject-non-finite", false, "reject inputs holding NaN or Inf (one pass over the data)")
	serverflag.MaxQueueDelay.Duration(fs, &c.MaxQueueDelay, 0, "0: off")
	fs.StringVar(&f.preferred, "preferred-batches", "", "dynamic batching: batch sizes sent at once, comma-separated")
	fs.StringVar(&f.tracePath, "trace", "", "write a Chrome trace of every batch to this file at exit")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile (pprof) of the serving, from the end of the warm-up to the end of the drain, to this file")
	fs.StringVar(&f.execTrace, "exectrace", "", "write an execution trace (runtime/trace: goroutines, blocking, scheduling; go tool trace reads it) of the same interval as -cpuprofile to this file")
	// The front door.
	fs.StringVar(&f.modelVersion, "model-version", "1", "the model's version")
	fs.StringVar(&f.httpAddr, "http-addr", ":8000", "HTTP/REST listen address (empty: no HTTP)")
	fs.StringVar(&f.grpcAddr, "grpc-addr", ":8001", "gRPC listen address (empty: no gRPC)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", ":8002", "Prometheus metrics listen address, GET /metrics (empty: none)")
	fs.DurationVar(&f.grace, "grace", 30*time.Second, "on SIGINT/SIGTERM: how long accepted requests have to be answered before the process stops anyway")
	fs.DurationVar(&f.drainDelay, "drain-delay", 0, "on SIGINT/SIGTERM: keep serving (and reporting not ready) this long before closing the listeners, so load balancers notice")
	fs.Int64Var(&f.maxBody, "max-body", 0, "largest HTTP body and gRPC message in bytes (0: one -max-batch FP32 request plus 1 MiB)")
	fs.DurationVar(&f.readHeaderTimeout, "read-header-timeout", 10*time.Second, "HTTP: time to read a request's headers")
	fs.DurationVar(&f.readTimeout, "read-timeout", time.Minute, "HTTP: time to read a whole request")
	fs.DurationVar(&f.writeTimeout, "write-timeout", 5*time.Minute, "HTTP: time from the end of the request's headers to the end of the answer")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 2*time.Minute, "HTTP and gRPC: close connections idle this long")
	fs.IntVar(&f.maxHeaderBytes, "max-header-bytes", 64<<10, "HTTP: largest request header block")
	fs.IntVar(&f.maxConns, "max-conns", 1024, "connections served in full per listener (HTTP, gRPC, metrics); when that many are open, a new one replaces the one idle longest if that one has had no request in progress for 1 s (since its last request ended, or since it opened), else it goes to -health-conns (0: no limit)")
	fs.IntVar(&f.healthConns, "health-conns", defaultHealthConns, "connections per HTTP and gRPC listener beyond -max-conns served only health checks (/v2/health/live and /ready; grpc.health.v1 Check and List, ServerLive, ServerReady), for 5 s each at most: every other request is answered 503 with Retry-After / UNAVAILABLE, so probes are answered while every -max-conns connection is busy; when they are all taken the oldest idle one makes room (0: none)")
	fs.StringVar(&f.tlsCertFile, "tls-cert", "", "PEM certificate chain: serve HTTP (h2 and http/1.1) and gRPC over TLS 1.2 or later with it and -tls-key (both or neither; the metrics listener stays plain)")
	fs.StringVar(&f.tlsKeyFile, "tls-key", "", "PEM private key of -tls-cert")
	fs.UintVar(&f.grpcMaxStreams, "grpc-max-streams", 128, "gRPC: concurrent calls per connection")
	fs.Int64Var(&f.grpcWindow, "grpc-window", protocol.DefaultStreamWindow, "gRPC: bytes a client may send on a call ahead of what the server has read (its HTTP/2 receive window; a connection's is 4 times it); 64 KiB to 256 MiB, capped at -max-body")
	fs.Int64Var(&f.inflightBytes, "inflight-bytes", protocol.DefaultInflightBytes, "input bytes held by requests being decoded or served at most; a request past it waits (block) or is refused (reject)")
	fs.BoolVar(&f.shm, "shm", false, "shared memory: turn on the system and (on -backend cuda) CUDA shared-memory API, fenced by the -shm-* flags (docs/DEPLOY.md, Security)")
	fs.StringVar(&f.shmKeyPrefix, "shm-key-prefix", protocol.DefaultKeyPrefix, "shared memory: a system region's key must name an object whose name starts with this (empty: any name)")
	fs.StringVar(&f.shmHeader, "shm-header", "", "shared memory: name=value of a header every call of the API must carry (gRPC: metadata, also as triton-grpc-protocol-<name>), as Triton's restricted protocols (empty: none)")
	fs.IntVar(&f.shmMaxRegions, "shm-max-regions", protocol.DefaultMaxRegions, "shared memory: regions clients may have registered (and mapped) at once")
	fs.IntVar(&f.maxIDBytes, "max-id-bytes", protocol.DefaultMaxIDBytes, "longest request id in bytes: a longer one is refused (413 / RESOURCE_EXHAUSTED); an id is echoed as sent")
	fs.Int64Var(&f.shmMaxBytes, "shm-max-bytes", protocol.DefaultSharedMemoryBytes, "shared memory: total bytes of those regions at most")
	fs.StringVar(&f.uint8Mean, "uint8-mean", "0.485,0.456,0.406", "UINT8 inputs: per-channel mean of (v/255 - mean)/std (on the GPU with -backend cuda, else on the host)")
	fs.StringVar(&f.uint8Std, "uint8-std", "0.229,0.224,0.225", "UINT8 inputs: per-channel std of (v/255 - mean)/std")
	fs.StringVar(&f.logFormat, "log", "text", "log format: text or json")
	fs.IntVar(&f.gcPercent, "gc-percent", protocol.DefaultGCPercent, "Go garbage collector target (GOGC) unless the GOGC environment variable is set: the front door allocates per request, and a higher target trades memory for CPU (-1: off)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, err
		}
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "inferbench serve: unexpected argument %q\n", fs.Arg(0))
		return nil, errUsage
	}
	if err := f.check(); err != nil {
		fmt.Fprintf(stderr, "inferbench serve: %v\n", err)
		return nil, errUsage
	}
	return f, nil
}

// check converts the string flags and checks every rule a flag has.
func (f *serveFlags) check() error {
	c := &f.cfg
	var err error
	sh := &f.shared
	c.Checkpoint, c.Seed, c.IdlePoll, f.modelName, f.grpcServer = sh.Checkpoint, sh.Seed, sh.IdlePoll, sh.Name(), sh.GRPCServer
	for _, v := range []struct {
		s *serverflag.Setting
		v string
	}{{serverflag.Backend, c.BackendName}, {serverflag.Model, sh.Model}, {serverflag.Pipeline, f.pipeline},
		{serverflag.Precision, f.precision}, {serverflag.Convs, sh.Convs}, {serverflag.GRPCServer, f.grpcServer}} {
		if err := v.s.Check(v.v); err != nil {
			return fmt.Errorf("-%s %q: %v", v.s.Name, v.v, err)
		}
	}
	c.Arch, _ = serverflag.Arch(sh.Model)
	c.Pipeline, _ = backend.ParsePipeline(f.pipeline)
	c.Precision, _ = backend.ParsePrecision(f.precision)
	c.Convs, _ = backend.ParseConvs(sh.Convs)
	if c.Height, c.Width, err = serverflag.ParseSize(sh.Size); err != nil {
		return fmt.Errorf("-size %q: %v", sh.Size, err)
	}
	switch f.queuePolicy {
	case "block":
		c.QueuePolicy = inference.Block
	case "reject":
		c.QueuePolicy = inference.Reject
	default:
		return fmt.Errorf("-queue-policy %q: want block or reject", f.queuePolicy)
	}
	for _, r := range []struct {
		name     string
		v        int
		min, max int // max 0: none
	}{
		{"-workers", c.Workers, 1, inference.LimitWorkers}, {"-slots", c.Slots, 0, inference.LimitSlots},
		{"-max-batch", c.MaxBatch, 1, inference.LimitMaxBatch}, {"-max-queue", c.MaxQueue, 1, inference.LimitMaxQueue},
		{"-max-header-bytes", f.maxHeaderBytes, 1024, 0}, {"-max-conns", f.maxConns, 0, 0},
		{"-health-conns", f.healthConns, 0, 0}, {"-max-id-bytes", f.maxIDBytes, 1, 0},
	} {
		if r.v < r.min {
			return fmt.Errorf("%s %d: must be at least %d", r.name, r.v, r.min)
		}
		if r.max > 0 && r.v > r.max {
			return fmt.Errorf("%s %d: must be at most %d", r.name, r.v, r.max)
		}
	}
	if f.grpcWindow < 64<<10 || f.grpcWindow > 256<<20 {
		return fmt.Errorf("-grpc-window %d: want 64 KiB (65536) to 256 MiB (268435456)", f.grpcWindow)
	}
	if f.grpcMaxStreams < 1 {
		return fmt.Errorf("-grpc-max-streams must be at least 1")
	}
	if c.Devices, err = intList("-"+serverflag.Devices.Name, f.devices, 0); err != nil {
		return err
	}
	if c.Batches, err = intList("-"+serverflag.Batches.Name, f.batches, 1); err != nil {
		return err
	}
	if c.PreferredBatches, err = intList("-preferred-batches", f.preferred, 1); err != nil {
		return err
	}
	for _, l := range []struct {
		name string
		v    []int
	}{{"-" + serverflag.Batches.Name, c.Batches}, {"-preferred-batches", c.PreferredBatches}} {
		for _, b := range l.v {
			if b > c.MaxBatch {
				return fmt.Errorf("%s: %d is larger than -max-batch %d", l.name, b, c.MaxBatch)
			}
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"-timeout", c.Timeout}, {"-max-queue-delay", c.MaxQueueDelay}, {"-grace", f.grace}, {"-drain-delay", f.drainDelay},
		{"-read-header-timeout", f.readHeaderTimeout}, {"-read-timeout", f.readTimeout}, {"-write-timeout", f.writeTimeout}, {"-idle-timeout", f.idleTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s %v: must not be negative", d.name, d.v)
		}
	}
	if err := serverflag.CheckIdlePoll(c.IdlePoll); err != nil {
		return fmt.Errorf("-idle-poll %v: %v", c.IdlePoll, err)
	}
	if f.maxBody < 0 || f.inflightBytes < 0 {
		return fmt.Errorf("-max-body and -inflight-bytes must not be negative")
	}
	if f.shmMaxRegions < 1 {
		return fmt.Errorf("-shm-max-regions %d: must be at least 1 (shared memory is off unless -shm)", f.shmMaxRegions)
	}
	if f.shmMaxBytes < 1 {
		return fmt.Errorf("-shm-max-bytes %d: must be at least 1", f.shmMaxBytes)
	}
	if strings.ContainsAny(f.shmKeyPrefix, "/\x00") || len(f.shmKeyPrefix) > 254 {
		return fmt.Errorf("-shm-key-prefix %q: want the start of a shared-memory object's name: no slash, at most 254 bytes", f.shmKeyPrefix)
	}
	if f.shmHeader != "" {
		if f.shmHeaderName, f.shmHeaderValue, err = protocol.ParseRequiredHeader(f.shmHeader); err != nil {
			return fmt.Errorf("-shm-header: %v", err)
		}
	}
	if f.norm.Mean, err = floatList("-uint8-mean", f.uint8Mean); err != nil {
		return err
	}
	if f.norm.Std, err = floatList("-uint8-std", f.uint8Std); err != nil {
		return err
	}
	if slices.Contains(f.norm.Std, 0) {
		return fmt.Errorf("-uint8-std %q: a standard deviation of 0 divides by zero", f.uint8Std)
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"-uint8-mean", len(f.norm.Mean)}, {"-uint8-std", len(f.norm.Std)}} {
		if c.Checkpoint == "" && l.n != c.Arch.InChannels { // a checkpoint's channels are known once it is read
			return fmt.Errorf("%s: %d values, want one for each of the model's %d channels", l.name, l.n, c.Arch.InChannels)
		}
	}
	f.cfg.Normalization = f.norm // the server's too: the cuda back-end normalises UINT8 on the GPU
	if f.gcPercent < -1 {
		return fmt.Errorf("-gc-percent %d: must be -1 (off) or at least 0", f.gcPercent)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return fmt.Errorf("-log %q: want text or json", f.logFormat)
	}
	if f.httpAddr == "" && f.grpcAddr == "" {
		return fmt.Errorf("-http-addr and -grpc-addr are both empty: nothing to serve")
	}
	for _, a := range []struct{ name, addr string }{{"-http-addr", f.httpAddr}, {"-grpc-addr", f.grpcAddr}, {"-metrics-addr", f.metricsAddr}} {
		if err := checkAddr(a.addr); a.addr != "" && err != nil {
			return fmt.Errorf("%s %q: %v", a.name, a.addr, err)
		}
	}
	return f.loadTLS()
}

// loadTLS loads -tls-cert and -tls-key, given both or neither.
func (f *serveFlags) loadTLS() error {
	switch {
	case f.tlsCertFile == "" && f.tlsKeyFile == "":
		return nil
	case f.tlsCertFile == "":
		return fmt.Errorf("-tls-key %q without -tls-cert: give both or neither", f.tlsKeyFile)
	case f.tlsKeyFile == "":
		return fmt.Errorf("-tls-cert %q without -tls-key: give both or neither", f.tlsCertFile)
	}
	cert, err := tls.LoadX509KeyPair(f.tlsCertFile, f.tlsKeyFile)
	if err != nil {
		return fmt.Errorf("-tls-cert %q and -tls-key %q: %v", f.tlsCertFile, f.tlsKeyFile, err)
	}
	f.tlsCert = &cert
	return nil
}

// sharedMemory is the front door's shared-memory settings the flags
// describe.
func (f *serveFlags) sharedMemory() protocol.SharedMemoryLimits {
	return protocol.SharedMemoryLimits{Enabled: f.shm, KeyPrefix: f.shmKeyPrefix, Header: f.shmHeaderName, HeaderValue: f.shmHeaderValue,
		MaxRegions: f.shmMaxRegions, MaxBytes: f.shmMaxBytes}
}

// checkAddr reports whether addr is a listen address [host]:port with a
// port of 0 to 65535 or a service's name (whether it can be listened on is found when it is).
func checkAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q: want a number of 0 to 65535 or a service name", port)
	}
	return nil
}

// intList parses a comma-separated list of integers of at least min.
func intList(name, s string, min int) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < min {
			return nil, fmt.Errorf("%s %q: want comma-separated integers of at least %d", name, s, min)
		}
		out = append(out, n)
	}
	return out, nil
}

// floatList parses a comma-separated list of finite numbers.
func floatList(name, s string) ([]float32, error) {
	var out []float32
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 32)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%s %q: want comma-separated numbers", name, s)
		}
		out = append(out, float32(v))
	}
	return out, nil
}
