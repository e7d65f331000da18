package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// options holds the parsed command line.
type options struct {
	matrixName string
	m          matrix
	name       string // output file name without .txt
	count      int
	bin        string // prebuilt test binary; empty means build one
	tags       string // build tags when building
	benchtime  string
	bench      string // -test.bench pattern
	out        string // results directory
	machine    string // results subdirectory; empty means from the gpu: or cpu: line
	commit     string
	dryRun     bool
	interleave bool          // run the binary count times with -test.count=1
	deadline   time.Duration // start no round that would end after this; 0: no limit
	appendTo   string        // existing results file to add the rounds to
	extra      []string      // flags after --, passed to the binary as they are
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	opts := &options{}
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sweep -matrix NAME [flags] [-- suite flags]\n\nMatrices:\n%s\nFlags:\n", matrixHelp())
		fs.PrintDefaults()
	}
	fs.StringVar(&opts.matrixName, "matrix", "cpu-quick", "named `matrix` to run")
	fs.StringVar(&opts.name, "name", "", "results file `name` without .txt (default the matrix name)")
	fs.IntVar(&opts.count, "count", 10, "run every configuration `n` times (benchmark -count)")
	fs.StringVar(&opts.bin, "bin", "", "prebuilt root test `binary` (go test -c [-tags cuda] -o .gpu/root.test .); default: build one")
	fs.StringVar(&opts.tags, "tags", "", "build `tags` (default cuda when the matrix uses the cuda back-end)")
	fs.StringVar(&opts.benchtime, "benchtime", "", "requests per run, as -test.benchtime (default the matrix's, e.g. 100x)")
	fs.StringVar(&opts.bench, "bench", "^BenchmarkServer$", "benchmark `regexp` (-test.bench)")
	fs.StringVar(&opts.out, "out", "results", "results `dir`")
	fs.StringVar(&opts.machine, "machine", "", "results subdirectory (default: the GPU name, else the CPU name)")
	fs.StringVar(&opts.commit, "commit", "", "commit to record (default: git rev-parse HEAD)")
	fs.BoolVar(&opts.interleave, "interleave", true, "run the binary -count times with -test.count=1, so that a drift in machine speed hits every configuration alike (false: one run with -test.count=N, which repeats each configuration back to back)")
	fs.DurationVar(&opts.deadline, "deadline", 0, "start no round that would end more than `duration` after the sweep began, judging by its slowest round so far (0: no limit); the file records the rounds done, and -append adds more later")
	fs.StringVar(&opts.appendTo, "append", "", "add the rounds to this existing results `file`, written by a sweep with the same suite arguments, commit and GPU (after a -deadline stop, or on a second session of a time-limited machine)")
	fs.BoolVar(&opts.dryRun, "n", false, "print the command and the number of configurations, run nothing")
	over := map[string]*string{}
	for _, d := range dims() {
		over[d.Flag] = fs.String(d.Flag, "", "override the matrix's `list` of "+d.Flag+" (comma-separated; the suite's -"+d.Flag+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	m, ok := matrices[opts.matrixName]
	if !ok {
		return nil, fmt.Errorf("sweep: unknown matrix %q; known:\n%s", opts.matrixName, matrixHelp())
	}
	for _, d := range dims() {
		if v := *over[d.Flag]; v != "" {
			m = m.with(d.Flag, strings.Split(v, ","))
		}
	}
	opts.m = m
	if opts.name == "" {
		opts.name = opts.matrixName
	}
	if opts.benchtime == "" {
		opts.benchtime = m.benchtime
	}
	if opts.tags == "" && m.usesCUDA() {
		opts.tags = "cuda"
	}
	if opts.count < 1 {
		return nil, fmt.Errorf("sweep: -count %d: need at least 1", opts.count)
	}
	opts.extra = fs.Args()
	return opts, nil
}

// rounds returns how many times the binary runs and the -test.count of each
// run: count runs of one when interleaving, else one run of count.
func (o *options) rounds() (rounds, perRound int) {
	if o.interleave {
		return o.count, 1
	}
	return 1, o.count
}

// benchArgs returns the test binary's arguments for a run that repeats every
// configuration count times: the benchmark selection, then the matrix as the
// suite's list flags, then the flags after --.
func (o *options) benchArgs(count int) []string {
	args := []string{
		"-test.run=^$", "-test.bench=" + o.bench, "-test.count=" + strconv.Itoa(count),
		"-test.benchtime=" + o.benchtime,
	}
	args = append(args, o.m.suiteArgs()...)
	return append(args, o.extra...)
}

// run builds (or takes) the test binary, runs the matrix and writes the
// results file; it prints the file's path to stdout and progress to stderr.
func run(args []string, stdout, stderr io.Writer) error {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// The binary's stderr is copied by an os/exec goroutine while we print
	// progress: share one locked writer.
	stderr = &lockedWriter{w: stderr}
	root, err := moduleRoot()
	if err != nil && opts.bin == "" {
		return err
	}
	if root == "" {
		root = "."
	}
	rounds, perRound := opts.rounds()
	binArgs := opts.benchArgs(perRound)
	total := opts.m.size() * opts.count
	var target *appendTarget
	if opts.appendTo != "" {
		// Refuse a file of another sweep before spending time on a run.
		if target, err = readAppendTarget(opts.appendTo); err != nil {
			return err
		}
		if err := target.checkSweep(opts); err != nil {
			return err
		}
	}
	if opts.dryRun {
		bin := opts.bin
		if bin == "" {
			bin = "<go test -c -tags '" + opts.tags + "'>"
		}
		of := ""
		if opts.interleave {
			of = fmt.Sprintf(" (%d rounds of)", rounds)
		}
		fmt.Fprintf(stdout, "%d configurations x %d runs = %d results\n%s%s %s\n", opts.m.size(), opts.count, total, bin, of, strings.Join(binArgs, " "))
		return nil
	}
	bin := opts.bin
	if bin == "" {
		dir, err := os.MkdirTemp("", "sweep")
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "root.test")
		build := exec.Command("go", "test", "-c", "-tags="+opts.tags, "-o", bin, ".")
		build.Dir, build.Stdout, build.Stderr = root, stderr, stderr
		fmt.Fprintf(stderr, "sweep: building %s\n", strings.Join(build.Args, " "))
		if err := build.Run(); err != nil {
			return fmt.Errorf("sweep: building the test binary: %w", err)
		}
	} else if abs, err := filepath.Abs(bin); err == nil {
		bin = abs
	}

	tmpDir := filepath.Join(opts.out, "tmp")
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	tmp, err := os.CreateTemp(tmpDir, opts.name+"-*.txt")
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	defer tmp.Close()

	fmt.Fprintf(stderr, "sweep: %s: %d configurations x %d runs in %d round(s); %s %s\n",
		opts.matrixName, opts.m.size(), opts.count, rounds, bin, strings.Join(binArgs, " "))
	rec := &recorder{w: tmp, total: total, start: time.Now(), now: time.Now, progress: stderr, config: map[string]string{}}
	var slowest time.Duration
	done := 0
	for round := 1; round <= rounds; round++ {
		if opts.deadline > 0 && round > 1 && time.Since(rec.start)+slowest > opts.deadline {
			fmt.Fprintf(stderr, "sweep: stopping after %d of %d rounds: one more (up to %s) would end past -deadline %s; add rounds later with -append\n",
				done, rounds, slowest.Round(time.Second), opts.deadline)
			break
		}
		// Rounds after the first, and all appended ones, drop their config
		// lines: a new date: line would make benchstat split the file into
		// tables.
		rec.skipConfig = round > 1 || opts.appendTo != ""
		began := time.Now()
		if err := runBinary(root, bin, binArgs, rec, stderr); err != nil {
			return fmt.Errorf("sweep: benchmark binary failed in round %d after %d results (partial output in %s): %w", round, rec.done, tmp.Name(), err)
		}
		slowest = max(slowest, time.Since(began))
		done++
	}
	if rec.done == 0 {
		return fmt.Errorf("sweep: no benchmark results (does the binary have %s?); output in %s", opts.bench, tmp.Name())
	}
	if opts.interleave {
		opts.count = done
	}
	if target != nil {
		if err := target.checkConfig(opts.config(rec.config), tmp.Name()); err != nil {
			return err
		}
		return target.add(opts.count, tmp, stdout)
	}
	return finish(opts, rec, tmp, stdout, stderr)
}

// runBinary runs the test binary once in dir root, feeding its output to rec.
func runBinary(root, bin string, args []string, rec *recorder, stderr io.Writer) error {
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stderr = root, stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	scanErr := rec.consume(pipe)
	return errors.Join(scanErr, cmd.Wait())
}

// finish writes the results file: our config lines (for keys the binary did
// not print itself), then the binary's output.
func finish(opts *options, rec *recorder, tmp *os.File, stdout, stderr io.Writer) error {
	machine := opts.machine
	if machine == "" {
		machine = slug(rec.config["gpu"])
	}
	if machine == "" {
		machine = slug(rec.config["cpu"])
	}
	if machine == "" {
		machine = "unknown"
	}
	dir := filepath.Join(opts.out, machine)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	path := filepath.Join(dir, opts.name+".txt")
	if _, err := os.Stat(path); err == nil {
		path = filepath.Join(dir, opts.name+"-"+time.Now().UTC().Format("20060102T150405")+".txt")
		fmt.Fprintf(stderr, "sweep: %s exists; writing %s\n", filepath.Join(dir, opts.name+".txt"), path)
	}
	var head strings.Builder
	head.WriteString(opts.header(opts.count))
	for _, kv := range opts.ownConfig(rec.config) {
		fmt.Fprintf(&head, "%s: %s\n", kv[0], kv[1])
	}
	if err := writeResults(path, head.String(), tmp, stdout); err != nil {
		return fmt.Errorf("sweep: %w (the results are in %s)", err, tmp.Name())
	}
	return nil
}

// header is a results file's first line, which records how the sweep ran:
// "# sweep -matrix M -count N -benchtime B" and the matrix's suite flags.
func (o *options) header(count int) string {
	return fmt.Sprintf("# sweep -matrix %s -count %d -benchtime %s %s\n", o.matrixName, count, o.benchtime, strings.Join(o.m.suiteArgs(), " "))
}

// ownConfig returns the config lines the sweep writes above the suite's
// output, leaving out keys the suite printed itself (in printed) and empty
// values: matrix, commit, date and sweep-args (the flags after --, or
// "none").
func (o *options) ownConfig(printed map[string]string) [][2]string {
	args := strings.Join(o.extra, " ")
	if args == "" {
		args = "none"
	}
	var out [][2]string
	for _, kv := range [][2]string{
		{"matrix", o.matrixName},
		{"commit", o.recordedCommit()},
		{"date", time.Now().UTC().Format(time.RFC3339)},
		{"sweep-args", args},
	} {
		if _, ok := printed[kv[0]]; !ok && kv[1] != "" {
			out = append(out, kv)
		}
	}
	return out
}

// config returns every config line a results file of this sweep would
// have: the suite's (printed), then the sweep's own.
func (o *options) config(printed map[string]string) map[string]string {
	out := maps.Clone(printed)
	for _, kv := range o.ownConfig(printed) {
		out[kv[0]] = kv[1]
	}
	return out
}

// recordedCommit is -commit, or HEAD's hash (looked up once).
func (o *options) recordedCommit() string {
	if o.commit == "" {
		o.commit = gitCommit()
	}
	return o.commit
}

// writeResults writes head and then tmp's contents to path, through a
// temporary file renamed into place (path is whole or untouched), removes tmp
// and prints path.
func writeResults(path, head string, tmp *os.File, stdout io.Writer) error {
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	next, err := os.CreateTemp(filepath.Dir(path), ".sweep-*")
	if err != nil {
		return err
	}
	_, err = io.WriteString(next, head)
	if err == nil {
		_, err = io.Copy(next, tmp)
	}
	if cerr := next.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(next.Name(), path)
	}
	if err != nil {
		os.Remove(next.Name())
		return err
	}
	tmp.Close()
	os.Remove(tmp.Name())
	fmt.Fprintln(stdout, path)
	return nil
}

// recorder copies the binary's output to w, notes its config lines and
// reports progress after each result line.
type recorder struct {
	w        io.Writer
	total    int
	done     int
	start    time.Time
	now      func() time.Time
	progress io.Writer
	config   map[string]string // config lines seen: gpu, cpu, commit...
	// skipConfig drops config and Unit lines instead of copying them.
	skipConfig bool
}

// configLine matches a benchmark-format configuration line.
var configLine = regexp.MustCompile(`^([a-z][^\s:]*):\s*(.*)$`)

func (r *recorder) consume(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		isConfig := configLine.MatchString(line) || strings.HasPrefix(line, "Unit ")
		if !(r.skipConfig && isConfig) {
			if _, err := fmt.Fprintln(r.w, line); err != nil {
				return err
			}
		}
		switch {
		case strings.HasPrefix(line, "Benchmark") && strings.Contains(line, "\t"):
			r.done++
			name, _, _ := strings.Cut(line, "\t")
			fmt.Fprintf(r.progress, "sweep: %s %s\n", progressLine(r.done, r.total, r.now().Sub(r.start)), strings.TrimSpace(name))
		case configLine.MatchString(line):
			m := configLine.FindStringSubmatch(line)
			if _, seen := r.config[m[1]]; !seen {
				r.config[m[1]] = m[2]
			}
		case line == "" || line == "PASS" || strings.HasPrefix(line, "Unit ") || strings.HasPrefix(line, "Benchmark"):
		default:
			// Test output such as skips and failures: show it.
			fmt.Fprintf(r.progress, "  %s\n", line)
		}
	}
	return sc.Err()
}

// progressLine formats "[k/n] p% elapsed E eta T".
func progressLine(done, total int, elapsed time.Duration) string {
	s := fmt.Sprintf("[%d/%d] %3.0f%% elapsed %s", done, total, 100*float64(done)/float64(max(total, 1)), elapsed.Round(time.Second))
	if done > 0 && done < total {
		eta := time.Duration(float64(elapsed) / float64(done) * float64(total-done))
		s += " eta " + eta.Round(time.Second).String()
	}
	return s
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// slug turns "NVIDIA H200" into "nvidia-h200".
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimSuffix(b.String(), "-")
	if len(out) > 48 {
		out = strings.TrimSuffix(out[:48], "-")
	}
	return out
}

// moduleRoot returns the directory of the enclosing go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("sweep: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("sweep: no go.mod above the current directory; run from the repository or pass -bin")
		}
		dir = parent
	}
}

// gitCommit returns HEAD's hash with "-dirty" if the tree has changes, or ""
// without git.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		commit += "-dirty"
	}
	return commit
}
