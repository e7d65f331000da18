package suite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/cuda"
	"github.com/inferbench/inferbench/inference/metrics"
	"github.com/inferbench/inferbench/inference/trace"
)

// The suite's state for this process's run, set by Main (go test) or
// Bench (the bench command).
var (
	flagValues settings
	conf       *config
	exports    *exporter
	info       infoLines
)

// algoCacheEnv names the environment variable that sets the cuda back-end's
// algorithm cache file.
var algoCacheEnv = cuda.CacheEnv

// coldCache is the algorithm cache file of every server under -cold: it is
// emptied before each server starts, and its path stays the same so that the
// back-end's config lines do not change from one server to the next.
var coldCache = filepath.Join(os.TempDir(), "inferbench-cold", "cudnn-algorithms.json")

// serverConfig returns the server configuration of one point of the matrix.
// New builds the seeded model (Config.Arch) or reads the checkpoint, so that
// load-ns includes building or loading it, whatever -model says.
func (c *config) serverConfig(be string, batch, workers int, pipe, prec, graphs string, devices int) (inference.Config, error) {
	p, err := backend.ParsePipeline(pipe)
	if err != nil {
		return inference.Config{}, err
	}
	pr, err := backend.ParsePrecision(prec)
	if err != nil {
		return inference.Config{}, err
	}
	convs, err := backend.ParseConvs(c.flags.shared.Convs)
	if err != nil {
		return inference.Config{}, err
	}
	devs := make([]int, devices)
	for i := range devs {
		devs[i] = i
	}
	cfg := inference.Config{
		Options:     backend.Options{Height: c.h, Width: c.w, MaxBatch: batch, Batches: []int{batch}, Workers: workers, Pipeline: p, Precision: pr, Graphs: graphs == "on", Convs: convs, Devices: devs, PinnedInput: c.flags.pinned},
		BackendName: be, Seed: c.flags.shared.Seed,
		MaxQueue: 4096, IdlePoll: c.flags.shared.IdlePoll,
	}
	if c.flags.shared.Checkpoint != "" {
		cfg.Checkpoint = c.flags.shared.Checkpoint // loaded, and timed, by New
	} else {
		cfg.Arch = c.arch // built from the seed, and timed, by New
	}
	return cfg, nil
}

// pointConfig returns the server configuration of point p: serverConfig's,
// with p's batching (batchSettings).
func (c *config) pointConfig(p point) (inference.Config, error) {
	cfg, err := c.serverConfig(p.be, p.batch, p.workers, p.pipe, p.prec, p.graphs, p.devices)
	cfg.MaxBatch, cfg.Batches, cfg.MaxQueueDelay = c.batchSettings(p.batch, p.batching)
	return cfg, err
}

// batchSettings returns MaxBatch, the prepared batch sizes and MaxQueueDelay
// of a server for batch-image requests: the batch alone with batching off
// (or unnamed); with "on", batchingSizes' and -max-queue-delay.
func (c *config) batchSettings(batch int, batching string) (int, []int, time.Duration) {
	if batching != "on" {
		return batch, []int{batch}, 0
	}
	maxBatch, sizes := batchingSizes(batch, c.flags.batchingMax, c.flags.batchingStep)
	return maxBatch, sizes, c.flags.delay
}

// subBench is one sub-benchmark's state across the calls testing makes of its
// function. For each -count run testing calls it first with b.N == 1, then
// (unless -benchtime is 1x) with larger b.N until -benchtime is met, and
// prints the last call's figures. Every run gets a server of its own, built
// in its first call, so warm-up is measured once per run.
type subBench struct {
	name      string
	cfg       inference.Config
	wire      *wireSpec // nil: an in-process server
	srv       *inference.Server
	fl        *fleet     // the run's servers over the wire
	run       int        // -count runs started, from 1
	peakReset bool       // the peak RSS was reset before the run's server was built
	last      *exportRun // the latest call's figures, exported when the run ends
	input     string     // the point's input datatype (point.input)
}

var subBenches struct {
	mu sync.Mutex
	m  map[string]*subBench
}

// subBenchFor returns the state of the sub-benchmark called name.
func subBenchFor(name string, cfg inference.Config) *subBench {
	subBenches.mu.Lock()
	defer subBenches.mu.Unlock()
	if subBenches.m == nil {
		subBenches.m = map[string]*subBench{}
	}
	sb, ok := subBenches.m[name]
	if !ok {
		sb = &subBench{name: name, cfg: cfg}
		subBenches.m[name] = sb
	}
	return sb
}

// server returns the server of the current -count run, starting a new run
// with a new server when b.N is 1.
//
// The first run of a sub-benchmark prints the back-end's config lines that
// changed (before testing prints the benchmark's name). Later runs cannot
// print: the name of their result line is already out. A later run whose
// server states other config lines fails, rather than mixing unlike set-ups
// in one sample. So that runs start alike, with -count above 1 (and without
// -cold) the first run builds and closes one unmeasured server first, which
// fills the algorithm cache.
func (sb *subBench) server(b runB) *inference.Server {
	if sb.srv != nil && b.iterations() > 1 {
		return sb.srv
	}
	if err := sb.endRun(); err != nil {
		b.Fatal(err)
	}
	sb.run++
	if sb.run == 1 && conf.count > 1 && !conf.flags.cold {
		s, err := startServer(sb.cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	sb.beginPeak()
	s, err := startServer(sb.cfg)
	if err != nil {
		b.Fatal(err)
	}
	kvs := s.Info().Config
	if sb.run == 1 {
		info.print(out, kvs)
	} else if line, changed := info.changed(kvs); changed {
		s.Close()
		b.Fatalf("run %d's server states another config line than run 1's (%s): its results cannot share run 1's; use -cold for a cold start in every run, or -count 1 and repeat the process", sb.run, line)
	}
	sb.srv = s
	return s
}

// startServer starts a server for cfg, with a fresh trace recorder under
// -timeline and an empty algorithm cache under -cold.
func startServer(cfg inference.Config) (*inference.Server, error) {
	if conf.flags.timeline != "" {
		cfg.Trace = trace.New()
	}
	if conf.flags.cold {
		if err := os.MkdirAll(filepath.Dir(coldCache), 0o755); err != nil {
			return nil, err
		}
		if err := os.Remove(coldCache); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("-cold: emptying the algorithm cache: %w", err)
		}
	}
	return inference.New(cfg)
}

// beginPeak starts the run's peak resident set size: the memory earlier
// sub-benchmarks left behind is returned to the system, then the high-water
// mark is reset to what is resident now.
func (sb *subBench) beginPeak() {
	debug.FreeOSMemory()
	sb.peakReset = metrics.ResetPeakRSS() == nil
}

// peakRSS returns the process's peak resident set size since the run's server
// was built, in bytes, or -1 when it cannot be measured.
func (sb *subBench) peakRSS() int64 {
	if !sb.peakReset {
		return -1
	}
	p, err := metrics.PeakRSS()
	if err != nil {
		return -1
	}
	return p
}

// fleet returns the servers of the current -count run of a wire
// sub-benchmark, as server does for an in-process one: a new run (b.N 1)
// starts new server processes, preceded in the first run by one unmeasured
// start under -count above 1 (and without -cold) so that runs start alike.
// Under -target, a run connects to the running servers again.
func (sb *subBench) fleet(b runB) *fleet {
	if sb.fl != nil && b.iterations() > 1 {
		return sb.fl
	}
	if err := sb.endRun(); err != nil {
		b.Fatal(err)
	}
	sb.run++
	ctx := context.Background()
	if sb.run == 1 && conf.count > 1 && !conf.flags.cold && len(conf.targets) == 0 {
		procs, err := startProcs(sb.wire.p, sb.wire.transport, sb.wire.servers)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range procs {
			if err := p.stop(); err != nil {
				b.Fatal(err)
			}
		}
	}
	f, err := startFleet(ctx, *sb.wire)
	if err != nil {
		b.Fatal(err)
	}
	sb.fl = f
	kvs := f.config()
	if sb.run == 1 {
		info.print(out, kvs)
	} else if line, changed := info.changed(kvs); changed {
		b.Fatalf("run %d's server states another config line than run 1's (%s): its results cannot share run 1's; use -cold for a cold start in every run, or -count 1 and repeat the process", sb.run, line)
	}
	return f
}

// endRun exports the finished run's figures and closes its server(s).
func (sb *subBench) endRun() error {
	if sb.last != nil {
		exports.export(sb.last, sb.run)
		report.add(sb.last)
		sb.last = nil
	}
	if sb.srv != nil {
		sb.srv.Close()
		sb.srv = nil
	}
	if sb.fl != nil {
		err := sb.fl.close()
		sb.fl = nil
		return err
	}
	return nil
}

// finish ends the sub-benchmark after testing has run all its -count runs.
func (sb *subBench) finish() error {
	err := sb.endRun()
	subBenches.mu.Lock()
	delete(subBenches.m, sb.name)
	subBenches.mu.Unlock()
	return err
}
