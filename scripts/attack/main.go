// Command attack plays, against a real `inferbench serve` process on
// loopback, what one bad client can do to a server, and measures what each
// attack cost the server. It is the process-level check of the front door's
// defences (issue 35's table); the unit tests of each package check the
// mechanisms.
//
// For each attack it:
//
//  1. starts a fresh server (`serve -backend nop -model tiny`, default
//     flags otherwise, on ports it picks) and waits until it is ready;
//  2. reads the server's resident memory (VmRSS) and CPU time;
//  3. plays the attack, probing /v2/health/live on a new connection while
//     the attack's connections are held;
//  4. reads the high-water mark of the server's resident memory (VmHWM)
//     and its CPU time again, checks the server still answers, and stops it.
//
// An attack passes when the server stayed up and answered every probe
// within the probe bound, its peak memory grew by at most the bytes the
// attack sent plus FixedBytes, and the attack's own check held (a refusal,
// a status, a GOAWAY). It prints one markdown table, a row an attack.
//
// Usage:
//
//	go run ./scripts/attack -bin path/to/inferbench [-scale 1] [-only name,...]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inferbench/inferbench/inference/protocol"
)

// FixedBytes is what an attack may add to the server's peak resident memory
// beyond the bytes it sent: buffers of fixed size, goroutine stacks of the
// attack's connections, and the collector's headroom.
const FixedBytes = 96 << 20

// FixedAddressBytes is the same allowance for the address space, which the
// Go runtime reserves in arenas of 64 MiB. The address space may grow by the
// server's in-flight byte budget (-inflight-bytes) besides: a request's
// input buffer is taken from it when the request declares its size, before
// the bytes arrive, and untouched pages of it are not resident.
const FixedAddressBytes = 512 << 20

// DefaultProbeBound is how long a health probe may take while an attack
// holds its connections: the bound the front door's health checks keep.
const DefaultProbeBound = 100 * time.Millisecond

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "attack:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	bin   string
	scale float64
	only  map[string]bool
	extra []string
	// inflight is serve's -inflight-bytes; 0 leaves its default.
	inflight int64
	// probeBound is how long a health probe may take.
	probeBound time.Duration
}

// budget is the server's in-flight byte budget.
func (o options) budget() int64 {
	if o.inflight > 0 {
		return o.inflight
	}
	return protocol.DefaultInflightBytes
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("attack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var only, extra string
	fs.StringVar(&o.bin, "bin", "", "the inferbench binary to attack (required)")
	fs.Float64Var(&o.scale, "scale", 1, "scale of the attacks' sizes and counts, in (0, 1]: 1 is issue 35's")
	fs.StringVar(&only, "only", "", "comma-separated attack names to play (default: all)")
	fs.StringVar(&extra, "serve-args", "", "extra arguments for serve, space-separated")
	fs.DurationVar(&o.probeBound, "probe-bound", DefaultProbeBound, "how long a health probe may take while an attack holds its connections")
	fs.Int64Var(&o.inflight, "inflight-bytes", 0, "serve's -inflight-bytes (0: its default), which the address space may grow by")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.bin == "" {
		return errors.New("-bin is required")
	}
	if o.scale <= 0 || o.scale > 1 {
		return fmt.Errorf("-scale %v: want a value in (0, 1]", o.scale)
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			if attackByName(n) == nil {
				return fmt.Errorf("-only: no attack %q", n)
			}
			o.only[n] = true
		}
	}
	o.extra = strings.Fields(extra)
	raiseFileLimit()
	results, err := playAll(o, stderr)
	writeTable(stdout, results, o)
	if err != nil {
		return err
	}
	for _, r := range results {
		if !r.pass(o) {
			return fmt.Errorf("%s failed", r.name)
		}
	}
	return nil
}

// playAll plays every selected attack, each on a fresh server.
func playAll(o options, progress io.Writer) ([]result, error) {
	var out []result
	for _, a := range attacks {
		if o.only != nil && !o.only[a.name] {
			continue
		}
		fmt.Fprintf(progress, "attack: %s ...\n", a.name)
		r, err := play(o, a)
		if err != nil {
			return out, fmt.Errorf("%s: %w", a.name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// raiseFileLimit lifts the soft limit on open files to the hard one, so the
// attacks that hold over a thousand connections can (the server inherits it).
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// server is one running `inferbench serve`.
type server struct {
	cmd        *exec.Cmd
	http, grpc string // host:port
	log        *lineCounter
	done       chan error
}

// freePort returns a loopback address nobody listens on now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs bin serve with args and waits until it is ready.
func start(bin string, args []string) (*server, error) {
	h, err := freePort()
	if err != nil {
		return nil, err
	}
	g, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{http: h, grpc: g, log: &lineCounter{}, done: make(chan error, 1)}
	all := append([]string{"serve", "-backend", "nop", "-model", "tiny", "-http-addr", h, "-grpc-addr", g, "-metrics-addr", ""}, args...)
	s.cmd = exec.Command(bin, all...)
	s.cmd.Stdout = io.Discard
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.done <- s.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := probe(h, "/v2/health/ready", time.Second); err == nil {
			return s, nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			return nil, fmt.Errorf("serve exited before it was ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.stop()
	return nil, errors.New("serve not ready within 30s")
}

// alive reports whether the process is still running.
func (s *server) alive() bool {
	select {
	case err := <-s.done:
		s.done <- err
		return false
	default:
		return true
	}
}

// stop ends the process (SIGTERM, then SIGKILL after 10 s).
func (s *server) stop() {
	if !s.alive() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// memory returns the process's resident memory (VmRSS) and its peak
// (VmHWM), and its address space (VmSize) and its peak (VmPeak), in bytes.
func (s *server) memory() (m mem, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return m, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		dst := map[string]*int64{"VmRSS": &m.rss, "VmHWM": &m.hwm, "VmSize": &m.size, "VmPeak": &m.peak}[k]
		if !ok || dst == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return m, fmt.Errorf("%s: %q", k, v)
		}
		*dst = kb << 10
	}
	return m, sc.Err()
}

// mem is what /proc/PID/status says of a process's memory, in bytes.
type mem struct{ rss, hwm, size, peak int64 }

// cpu returns the process's user and system CPU time.
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's name (which may hold spaces) start at
	// state; utime and stime are the 14th and 15th fields of the line.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat: %q", b)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(u+st) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// probe GETs path on a new connection and returns how long the answer took;
// an answer other than 200 is an error.
func probe(addr, path string, timeout time.Duration) (time.Duration, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	t0 := time.Now()
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", path, resp.Status)
	}
	return time.Since(t0), nil
}

// lineCounter counts the lines written to it (the server's log).
type lineCounter struct {
	lines atomicInt
}

func (l *lineCounter) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\n' {
			l.lines.add(1)
		}
	}
	return len(p), nil
}

// play runs one attack on a fresh server.
func play(o options, a *attack) (result, error) {
	args := append([]string{}, o.extra...)
	if o.inflight > 0 {
		args = append(args, "-inflight-bytes", strconv.FormatInt(o.inflight, 10))
	}
	if a.conns && o.scale < 1 {
		args = append(args, "-max-conns", strconv.Itoa(connCount(o.scale)-connsOver))
	}
	s, err := start(o.bin, args)
	if err != nil {
		return result{}, err
	}
	defer s.stop()
	m0, err := s.memory()
	if err != nil {
		return result{}, err
	}
	cpu0, err := s.cpu()
	if err != nil {
		return result{}, err
	}
	logs0 := s.log.lines.load()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t := &target{server: s, scale: o.scale}
	r := result{name: a.name, row: a.row}
	r.sent, r.check = a.play(ctx, t)
	r.probes, r.probeMax, r.probeErr = t.probes, t.probeMax, t.probeErr
	r.alive = s.alive()
	if r.alive {
		// The attack's connections are closed: the server has a moment to
		// see them go.
		var err error
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err = probe(s.http, "/v2/health/live", 2*time.Second); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			r.alive = false
			r.check = errors.Join(r.check, fmt.Errorf("after the attack: %w", err))
		}
	}
	if r.alive {
		m1, err := s.memory()
		if err != nil {
			return r, err
		}
		r.growth = m1.hwm - m0.rss
		r.vgrowth = m1.peak - m0.size
		cpu1, err := s.cpu()
		if err != nil {
			return r, err
		}
		r.cpu = cpu1 - cpu0
	}
	r.logs = s.log.lines.load() - logs0
	return r, nil
}

// result is what one attack cost.
type result struct {
	name, row string
	sent      int64 // bytes the attack sent
	growth    int64 // peak resident memory over the resident memory before
	vgrowth   int64 // peak address space over the address space before
	cpu       time.Duration
	logs      int64 // log lines the server wrote during the attack
	alive     bool
	probes    int
	probeMax  time.Duration
	probeErr  error
	check     error // the attack's own check
}

// memOK reports whether the peak resident memory and the peak address
// space each grew by at most the bytes sent plus their fixed allowance: a
// buffer allocated for a claim and never touched shows in the address
// space only, and is what an address-space limit kills a process for.
func (r result) memOK(o options) bool {
	return r.growth <= r.sent+FixedBytes && r.vgrowth <= r.sent+o.budget()+FixedAddressBytes
}

func (r result) pass(o options) bool {
	return r.alive && r.memOK(o) && r.probeErr == nil && r.probeMax <= o.probeBound && r.check == nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// writeTable prints the results as a markdown table.
func writeTable(w io.Writer, rs []result, o options) {
	fmt.Fprintf(w, "| attack | issue row | sent | peak RSS growth (bound: sent + %s) | peak address-space growth (bound: sent + %s + %s in-flight budget) | server CPU | log lines | up | health probes: max (bound %v) | check | verdict |\n", mib(FixedBytes), mib(FixedAddressBytes), mib(o.budget()), o.probeBound)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		probes := "-"
		if r.probes > 0 {
			probes = fmt.Sprintf("%d: %.1f ms", r.probes, float64(r.probeMax)/1e6)
			if r.probeErr != nil {
				probes += "; " + oneLine(r.probeErr)
			}
		}
		check := "ok"
		if r.check != nil {
			check = oneLine(r.check)
		}
		verdict := "pass"
		if !r.pass(o) {
			verdict = "FAIL"
		}
		growth, vgrowth, cpu := "-", "-", "-"
		if r.alive {
			growth, vgrowth, cpu = mib(r.growth), mib(r.vgrowth), fmt.Sprintf("%.2f s", r.cpu.Seconds())
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %d | %v | %s | %s | %s |\n",
			r.name, r.row, mib(r.sent), growth, vgrowth, cpu, r.logs, r.alive, probes, check, verdict)
	}
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
