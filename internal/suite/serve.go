package suite

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/internal/serverflag"
)

// The wire transports drive `inferbench serve` processes: this file starts
// and stops them.
//
//  1. serveBinary is -serve-bin, or the command built once per run
//     (go build, with -tags cuda when this binary has it);
//  2. startServe runs it with flags derived from the configuration point, on
//     a loopback port it picks itself, and reads its JSON log: the address of
//     each "listening" line, the warm-up split and back-end config lines of
//     the "warm-up" line, and "serving", the moment it is ready;
//  3. stop sends SIGTERM, which drains the server, and waits for its exit.

// serveStartTimeout bounds a server's start, warm-up included (a cold cuDNN
// algorithm search on a GPU takes tens of seconds).
const serveStartTimeout = 5 * time.Minute

var serveBin struct {
	once sync.Once
	dir  string // the build's temporary directory
	path string
	err  error
}

// serveBinary returns the inferbench binary to start.
func serveBinary() (string, error) {
	if p := conf.flags.serveBin; p != "" {
		return filepath.Abs(p)
	}
	serveBin.once.Do(func() { serveBin.path, serveBin.err = buildServe() })
	return serveBin.path, serveBin.err
}

// buildServe builds cmd/inferbench into a temporary directory.
func buildServe() (string, error) {
	goCmd, err := findGo()
	if err != nil {
		return "", fmt.Errorf("building inferbench serve: %w (give -serve-bin)", err)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if serveBin.dir, err = os.MkdirTemp("", "inferbench-serve"); err != nil {
		return "", err
	}
	bin := filepath.Join(serveBin.dir, "inferbench")
	args := []string{"build", "-o", bin}
	if suiteTags != "" {
		args = append(args, "-tags", suiteTags)
	}
	cmd := exec.Command(goCmd, append(args, "./cmd/inferbench")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return bin, nil
}

// removeServeBuild removes the binary serveBinary built, if any; a later
// serveBinary builds it again.
func removeServeBuild() {
	if serveBin.dir != "" {
		os.RemoveAll(serveBin.dir)
	}
	serveBin.once = sync.Once{}
	serveBin.dir, serveBin.path, serveBin.err = "", "", nil
}

// moduleRoot returns the directory of the go.mod above the working
// directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory to build cmd/inferbench in (give -serve-bin)")
		}
		dir = parent
	}
}

// serveArgs returns the serve command's flags for point p, listening for
// transport on a loopback port of its choice, without metrics.
func (c *config) serveArgs(p point, transport string) []string {
	ints := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = strconv.Itoa(i)
		}
		return strings.Join(s, ",")
	}
	httpAddr, grpcAddr := "", "127.0.0.1:0"
	if schemeOf(transport) == httpT {
		httpAddr, grpcAddr = grpcAddr, httpAddr
	}
	maxBatch, batches, delay := c.batchSettings(p.batch, p.batching)
	sizes := make([]string, len(batches))
	for i, n := range batches {
		sizes[i] = strconv.Itoa(n)
	}
	sh := &c.flags.shared
	name := func(s *serverflag.Setting) string { return "-" + s.Name } // serve's flag of a setting the suite shares
	args := []string{"serve", "-log", "json", "-http-addr", httpAddr, "-grpc-addr", grpcAddr, "-metrics-addr", "",
		name(serverflag.ModelName), sh.Name(), name(serverflag.Backend), p.be,
		"-max-batch", strconv.Itoa(maxBatch), name(serverflag.Batches), strings.Join(sizes, ","),
		name(serverflag.MaxQueueDelay), delay.String(), name(serverflag.Workers), strconv.Itoa(p.workers),
		name(serverflag.Pipeline), p.pipe, name(serverflag.Precision), p.prec,
		name(serverflag.Graphs) + "=" + strconv.FormatBool(p.graphs == "on"), name(serverflag.Devices), ints(p.devices),
		name(serverflag.Size), fmt.Sprintf("%dx%d", c.h, c.w), name(serverflag.Seed), strconv.FormatUint(sh.Seed, 10),
		name(serverflag.PinnedInput) + "=" + strconv.FormatBool(c.flags.pinned), name(serverflag.Convs), sh.Convs,
		"-max-queue", "4096", "-queue-policy", "block",
		name(serverflag.IdlePoll), sh.IdlePoll.String(), name(serverflag.GRPCServer), sh.GRPCServer}
	if shmTransport(transport) || cudaSHMTransport(transport) {
		// Its objects' names carry serve's default -shm-key-prefix.
		args = append(args, "-shm")
	}
	if sh.Checkpoint != "" {
		abs, err := filepath.Abs(sh.Checkpoint)
		if err != nil {
			abs = sh.Checkpoint
		}
		return append(args, name(serverflag.Checkpoint), abs)
	}
	return append(args, name(serverflag.Model), c.model)
}

// schemeOf is the protocol a transport speaks: grpc or http.
func schemeOf(transport string) string {
	return strings.TrimSuffix(strings.TrimSuffix(transport, "-cudashm"), "-shm")
}

// serveEnv returns the environment of server i of n on point p: with -servers
// on cuda, its own devices (CUDA_VISIBLE_DEVICES, counted within this
// process's own CUDA_VISIBLE_DEVICES when set); under -cold, an algorithm
// cache of its own.
func (c *config) serveEnv(p point, i int) ([]string, error) {
	env := os.Environ()
	if c.servers != nil && p.be == "cuda" {
		var visible []string
		if v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
			visible = list(v)
		}
		var mine []string
		for k := i * p.devices; k < (i+1)*p.devices; k++ {
			switch {
			case visible == nil:
				mine = append(mine, strconv.Itoa(k))
			case k < len(visible):
				mine = append(mine, visible[k])
			default:
				return nil, fmt.Errorf("server %d needs GPUs %d to %d, and CUDA_VISIBLE_DEVICES=%s has %d", i, i*p.devices, (i+1)*p.devices-1,
					strings.Join(visible, ","), len(visible))
			}
		}
		env = append(env, "CUDA_VISIBLE_DEVICES="+strings.Join(mine, ","))
	}
	if c.flags.cold {
		cache := fmt.Sprintf("%s.server%d", coldCache, i)
		if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
			return nil, err
		}
		if err := os.Remove(cache); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("-cold: emptying the algorithm cache: %w", err)
		}
		env = append(env, algoCacheEnv+"="+cache)
	}
	return env, nil
}

// serveProc is a running inferbench serve process.
type serveProc struct {
	cmd     *exec.Cmd
	addrs   map[string]string // where it listens, by protocol (grpc, http)
	ready   time.Duration     // from exec to its "serving" line, on this process's clock
	warm    inference.Warmup
	config  []backend.KV // the back-end's config lines, from its warm-up line
	tail    logTail
	done    chan struct{} // closed once the process has exited
	waitErr error         // its exit, once done is closed
}

// startServe starts bin with args and env and waits until it serves.
func startServe(bin string, args, env []string) (*serveProc, error) {
	p := &serveProc{cmd: exec.Command(bin, args...), addrs: map[string]string{}, done: make(chan struct{})}
	p.cmd.Env = env
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := startChild(p.cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	ready := make(chan error, 1)
	go p.read(stderr, start, ready) // ends at the process's exit, which stop brings about
	timer := time.NewTimer(serveStartTimeout)
	defer timer.Stop()
	select {
	case err = <-ready:
	case <-timer.C:
		err = fmt.Errorf("not serving after %v", serveStartTimeout)
	}
	if err != nil {
		p.kill()
		return nil, fmt.Errorf("inferbench %s: %w\n%s", strings.Join(args, " "), err, p.tail.String())
	}
	return p, nil
}

// read reads the process's log until it exits, then waits for it. It sends
// ready nil at the "serving" line, or an error if the process exits first.
func (p *serveProc) read(stderr io.Reader, start time.Time, ready chan<- error) {
	defer close(p.done)
	serving := false
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		p.tail.add(line)
		if serving {
			continue
		}
		var e struct{ Msg, Protocol, Addr string }
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		switch e.Msg {
		case "listening":
			p.addrs[e.Protocol] = e.Addr
		case "warm-up":
			var err error
			if p.warm, p.config, err = parseWarmup(line); err != nil {
				p.tail.add([]byte("(the suite: " + err.Error() + ")"))
			}
		case "serving":
			p.ready = time.Since(start)
			serving = true
			ready <- nil
		}
	}
	io.Copy(io.Discard, stderr)
	p.waitErr = p.cmd.Wait()
	if !serving {
		ready <- fmt.Errorf("exited before serving (%v)", p.waitErr)
	}
}

// parseWarmup reads a "warm-up" log line: load, setup and first (slog's JSON
// writes durations as nanoseconds) and, in their order, the back-end's config
// lines (every string attribute).
func parseWarmup(line []byte) (inference.Warmup, []backend.KV, error) {
	var w inference.Warmup
	var kvs []backend.KV
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return w, nil, fmt.Errorf("warm-up line: not a JSON object")
	}
	seen := 0
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return w, nil, fmt.Errorf("warm-up line: %w", err)
		}
		key, _ := kt.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return w, nil, fmt.Errorf("warm-up line: %s: %w", key, err)
		}
		switch val := v.(type) {
		case json.Number:
			dst := map[string]*time.Duration{"load": &w.Load, "setup": &w.Setup, "first": &w.First}[key]
			if dst == nil {
				continue
			}
			ns, err := val.Int64()
			if err != nil {
				return w, nil, fmt.Errorf("warm-up line: %s %v is not nanoseconds", key, val)
			}
			*dst = time.Duration(ns)
			seen++
		case string:
			if key != "time" && key != "level" && key != "msg" {
				kvs = append(kvs, backend.KV{Key: key, Value: val})
			}
		}
	}
	if seen != 3 {
		return w, kvs, fmt.Errorf("warm-up line without load, setup and first in nanoseconds: %s", line)
	}
	return w, kvs, nil
}

// stop ends the process (SIGTERM: it drains, then exits 0) and reports an
// exit that was not clean.
func (p *serveProc) stop() error {
	select {
	case <-p.done:
		return p.exitErr("had exited")
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.kill()
		return fmt.Errorf("inferbench serve: SIGTERM: %w", err)
	}
	select {
	case <-p.done:
		return p.exitErr("after SIGTERM")
	case <-time.After(time.Minute):
		p.kill()
		return fmt.Errorf("inferbench serve: still running a minute after SIGTERM: killed\n%s", p.tail.String())
	}
}

func (p *serveProc) exitErr(when string) error {
	if p.waitErr != nil {
		return fmt.Errorf("inferbench serve exited %s: %v\n%s", when, p.waitErr, p.tail.String())
	}
	return nil
}

// kill stops the process at once and waits for its exit.
func (p *serveProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// logTail keeps the last lines of a log. Safe for concurrent use.
type logTail struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 40

func (l *logTail) add(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == tailLines {
		l.lines = append(l.lines[:0], l.lines[1:]...)
	}
	l.lines = append(l.lines, string(line))
}

// String returns the lines kept, each indented, for an error message.
func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "    (no log)"
	}
	return "    " + strings.Join(l.lines, "\n    ")
}

// procCPUTime returns the CPU time process pid has used: the sum over its
// threads of the time they ran (Linux: /proc/PID/task/TID/schedstat, in
// nanoseconds; /proc/PID/stat's 10 ms ticks would round a short run to 0).
// A thread that ended is no longer counted, which a Go server's threads
// rarely do.
func procCPUTime(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended since the listing
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s/%s/schedstat is empty", dir, t.Name())
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// procPeakRSS returns the peak resident set size of process pid in bytes
// (Linux: VmHWM in /proc/PID/status).
func procPeakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status VmHWM: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmHWM", pid)
}

// procSampler measures the CPU utilisation of server processes over an
// interval as the cpu back-end measures its own: their CPU time over wall
// time times the machine's cores, in percent.
type procSampler struct {
	pids []int
	wall time.Time
	cpu  time.Duration
}

func (s *procSampler) total() (time.Duration, error) {
	var sum time.Duration
	for _, pid := range s.pids {
		t, err := procCPUTime(pid)
		if err != nil {
			return 0, err
		}
		sum += t
	}
	return sum, nil
}

func (s *procSampler) Start() error {
	cpu, err := s.total()
	s.wall, s.cpu = time.Now(), cpu
	return err
}

func (s *procSampler) Stop() (backend.Utilization, error) {
	cpu, err := s.total()
	if err != nil {
		return backend.Utilization{}, err
	}
	u := backend.Utilization{Kind: backend.ProcessCPU}
	if wall := time.Since(s.wall); wall > 0 {
		u.Percent = 100 * float64(cpu-s.cpu) / (float64(wall) * float64(runtime.NumCPU()))
	}
	return u, nil
}
