package suite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/metrics"
)

// wireSpec is what a sub-benchmark over a wire transport drives.
type wireSpec struct {
	transport string // grpc, http, grpc-shm, http-shm, grpc-cudashm, http-cudashm
	servers   int    // servers driven at once
	p         point  // their configuration (started servers), or only the batch (-target)
	// outstanding bounds the requests in flight (closed load), or is 0 when
	// nothing bounds them: it sizes the shared-memory output slots.
	outstanding int
}

// fleet is the servers one -count run of a wire sub-benchmark drives: the
// processes the suite started (none under -target), a client of each, the
// model they serve and, over shared memory, the regions registered on each.
// Requests go to the server with the fewest outstanding.
type fleet struct {
	spec     wireSpec
	procs    []*serveProc
	clients  []wireClient
	model    remoteModel
	bal      *client.Balancer
	answered []atomic.Uint64 // per server: responses without error, since the start
	plain    *client.InferRequest
	shm      *shmSet
	util     backend.Sampler // nil: none
	gpu      *nvmlSampler    // closed with the fleet
	// utilNote says why no utilisation is measured, when util is nil;
	// noted, that a benchmark logged it.
	utilNote string
	noted    bool
}

// startFleet starts (or, under -target, connects to) the servers of spec and
// prepares the request: its input once, in the suite's memory or in a
// shared-memory region registered on every server.
func startFleet(ctx context.Context, spec wireSpec) (f *fleet, err error) {
	f = &fleet{spec: spec}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.close())
			f = nil
		}
	}()
	scheme := schemeOf(spec.transport)
	var addrs []string
	if len(conf.targets) > 0 {
		for _, t := range conf.targets {
			addrs = append(addrs, t.addr)
		}
		f.model = *conf.remote
	} else {
		if f.procs, err = startProcs(spec.p, spec.transport, spec.servers); err != nil {
			return f, err
		}
		for _, p := range f.procs {
			addrs = append(addrs, p.addrs[scheme])
		}
	}
	for _, a := range addrs {
		c, err := dial(scheme, a, conf.targetTLS) // nil unless -target is TLS
		if err != nil {
			return f, err
		}
		f.clients = append(f.clients, c)
	}
	if f.procs != nil {
		if f.model, err = learnModel(ctx, f.clients[0], conf.flags.shared.Name(), conf.h, conf.w); err != nil {
			return f, err
		}
		f.setSampler()
	}
	batch := spec.p.batch
	if err := f.model.checkBatch(batch); err != nil {
		return f, err
	}
	f.answered = make([]atomic.Uint64, len(f.clients))
	if f.bal, err = client.NewBalancer(len(f.clients)); err != nil {
		return f, err
	}
	shape := []int64{int64(batch), f.model.c, f.model.h, f.model.w}
	data := make([]float32, batch*int(f.model.c*f.model.h*f.model.w))
	rng := rand.New(rand.NewPCG(conf.flags.shared.Seed, 99)) // the in-process input's values
	for i := range data {
		data[i] = float32(rng.NormFloat64())
	}
	in := client.FP32(f.model.input, shape, data)
	if spec.p.input == "uint8" { // the in-process input's bytes
		in = client.Tensor{Name: f.model.input, Datatype: "UINT8", Shape: shape, Data: randomBytes(make([]byte, len(data)), conf.flags.shared.Seed)}
	}
	if !shmTransport(spec.transport) && !cudaSHMTransport(spec.transport) {
		f.plain = &client.InferRequest{Model: f.model.name, Inputs: []client.Tensor{in}}
		return f, nil
	}
	f.shm, err = newSHMSet(ctx, f, in, cudaSHMTransport(spec.transport))
	return f, err
}

// startProcs starts n servers of point p for transport at once.
func startProcs(p point, transport string, n int) ([]*serveProc, error) {
	bin, err := serveBinary()
	if err != nil {
		return nil, err
	}
	procs := make([]*serveProc, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range procs {
		env, err := conf.serveEnv(p, i)
		if err != nil {
			errs[i] = err
			continue
		}
		wg.Go(func() { procs[i], errs[i] = startServe(bin, conf.serveArgs(p, transport), env) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, pr := range procs {
			if pr != nil {
				pr.kill()
			}
		}
		return nil, err
	}
	return procs, nil
}

// setSampler picks the utilisation the suite can measure of the servers it
// started: NVML's for the GPUs they use (cuda), else their CPU time.
func (f *fleet) setSampler() {
	var pids []int
	for _, p := range f.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	if f.spec.p.be != "cuda" {
		ps := &procSampler{pids: pids}
		if _, err := ps.total(); err != nil {
			f.utilNote = "no CPU utilisation of the servers: " + err.Error()
			return
		}
		f.util = ps
		return
	}
	g, err := gpuSampler(pids)
	if err != nil {
		f.utilNote = "no GPU utilisation of the servers: " + err.Error()
		return
	}
	f.gpu, f.util = g, g
}

// sampler is the utilisation sampler, or nil.
func (f *fleet) sampler() backend.Sampler { return f.util }

// infer sends one request to server i and waits for its answer.
func (f *fleet) infer(ctx context.Context, i int) error { return f.inferOn(ctx, i, -1) }

// inferOn is infer on the gRPC client's connection conn, or on the one the
// client picks when conn is negative.
func (f *fleet) inferOn(ctx context.Context, i, conn int) error {
	req := f.plain
	if f.shm != nil {
		slot, owned := f.shm.slots.get()
		defer f.shm.slots.put(slot, owned)
		req = f.shm.reqs[slot]
	}
	var err error
	if gc, ok := f.clients[i].(*client.GRPCClient); ok && conn >= 0 {
		_, err = gc.InferOn(ctx, conn, req)
	} else {
		_, err = f.clients[i].Infer(ctx, req)
	}
	if err == nil {
		f.answered[i].Add(1)
	}
	return err
}

// warmUp sends every server, at once, one request for each connection the
// measurement will use on it, and as many as the load keeps outstanding on
// it, and waits for the answers: over gRPC, round the client's connections
// (-grpc-conns), at least one on each; over HTTP, at most maxWarmUp (the
// client opens a connection for each request in flight). When the load
// bounds nothing (burst and open loads), one a connection. The first request
// on a connection pays for the connection's buffers (and the server's) and
// for its TCP window's growth, several times the next ones' at batch 256
// over gRPC; and the server's pool of pinned input buffers grows until it
// holds the requests in flight, each buffer a call to the driver that holds
// up the others: no measured request should carry either.
func (f *fleet) warmUp(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i, c := range f.clients {
		n, conns := f.warmUpOn(c)
		for k := range n {
			conn := -1 // the client picks
			if conns > 0 {
				conn = k % conns
			}
			wg.Go(func() {
				if err := f.inferOn(ctx, i, conn); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("warm-up request %d of %d to server %d: %w", k+1, n, i, err))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// warmUpOn is how many requests warmUp sends at once to the server of
// client c and, over gRPC, over how many connections they go round (0: the
// client picks).
func (f *fleet) warmUpOn(c wireClient) (n, conns int) {
	if gc, ok := c.(*client.GRPCClient); ok {
		return max(gc.Conns(), f.outstandingPerServer(maxGRPCWarmUp)), gc.Conns()
	}
	return max(1, f.outstandingPerServer(maxWarmUp)), 0
}

// maxWarmUp bounds the warm-up requests sent to one server over HTTP (whose
// client keeps 64 connections to a server at most), maxGRPCWarmUp over gRPC
// (the queue of the servers the suite starts).
const (
	maxWarmUp     = 64
	maxGRPCWarmUp = 4096
)

// outstandingPerServer is the requests the load keeps outstanding on a
// server (rounded up), at most most; 0 when the load bounds none.
func (f *fleet) outstandingPerServer(most int) int {
	if o, s := f.spec.outstanding, max(f.spec.servers, 1); o > 0 {
		return min((o+s-1)/s, most)
	}
	return 0
}

// snapshot reads the responses received from each server and, where the
// servers offer the statistics extension, their statistics.
func (f *fleet) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{answered: make([]uint64, len(f.answered))}
	for i := range f.answered {
		s.answered[i] = f.answered[i].Load()
	}
	if !f.model.stats {
		return s, nil
	}
	s.servers = make([]serverSums, len(f.clients))
	for i, c := range f.clients {
		ms, err := c.ModelStatistics(ctx, f.model.name, "")
		if err != nil {
			return s, fmt.Errorf("server %d: statistics: %w", i, err)
		}
		for _, m := range ms {
			if m.Name == f.model.name {
				s.servers[i].add(sumsOfModel(m))
			}
		}
	}
	return s, nil
}

// sumsOfModel maps Triton's statistics onto the suite's server figures:
// queue, compute_input, compute_infer and compute_output onto the stages,
// inference_count onto images and execution_count onto batches.
func sumsOfModel(m client.ModelStatistics) serverSums {
	var d serverSums
	is := m.InferenceStats
	for st, x := range map[metrics.Stage]client.StatisticDuration{
		metrics.Queue: is.Queue, metrics.CopyIn: is.ComputeInput, metrics.Compute: is.ComputeInfer, metrics.CopyOut: is.ComputeOutput,
	} {
		d.stage[st].n, d.stage[st].sum = int64(x.Count), int64(x.Ns)
	}
	d.batches, d.items = m.ExecutionCount, m.InferenceCount
	return d
}

// warmup is what the suite knows of the servers' warm-up: that of the one
// that took longest to serve, from its log.
func (f *fleet) warmup() warmupInfo {
	if len(f.procs) == 0 {
		return warmupInfo{}
	}
	slow := f.procs[0]
	for _, p := range f.procs[1:] {
		if p.ready > slow.ready {
			slow = p
		}
	}
	return warmupInfo{known: true, Warmup: slow.warm, start: slow.ready}
}

// peakRSS returns the sum of the started servers' peak resident set sizes
// in bytes, or -1 when unknown (-target, or no /proc).
func (f *fleet) peakRSS() int64 {
	if len(f.procs) == 0 {
		return -1
	}
	var sum int64
	for _, p := range f.procs {
		n, err := procPeakRSS(p.cmd.Process.Pid)
		if err != nil {
			return -1
		}
		sum += n
	}
	return sum
}

// config returns the back-end's config lines the first server logged.
func (f *fleet) config() []backend.KV {
	if len(f.procs) == 0 {
		return nil
	}
	return f.procs[0].config
}

// describe says how the servers fared, for a failed run's message.
func (f *fleet) describe() string {
	var b strings.Builder
	for i, p := range f.procs {
		select {
		case <-p.done:
			fmt.Fprintf(&b, "\nserver %d exited: %v\n%s", i, p.waitErr, p.tail.String())
		default:
		}
	}
	return b.String()
}

// close unregisters the shared-memory regions, closes the clients, stops
// the servers it started and removes the shared-memory objects.
func (f *fleet) close() error {
	var errs []error
	if f.shm != nil {
		errs = append(errs, f.shm.unregister(f.clients))
	}
	for _, c := range f.clients {
		c.Close()
	}
	if f.gpu != nil {
		errs = append(errs, f.gpu.Close())
	}
	stops := make([]error, len(f.procs))
	var wg sync.WaitGroup
	for i, p := range f.procs {
		wg.Go(func() { stops[i] = p.stop() })
	}
	wg.Wait()
	errs = append(errs, stops...)
	if f.shm != nil {
		errs = append(errs, f.shm.free())
	}
	return errors.Join(errs...)
}

// fleetTarget sends the load generator's requests to the fleet, each to the
// server with the fewest outstanding. With log set, every answer's send and
// arrival times are kept for -requests.
type fleetTarget struct {
	f   *fleet
	log *requestLog
	ids *atomic.Uint64
}

func (t fleetTarget) Send(ctx context.Context, at time.Time) (func() error, error) {
	i, release := t.f.bal.Acquire()
	type answer struct {
		err error
		at  time.Time
	}
	done := make(chan answer, 1)
	go func() { // waited for by the returned function
		err := t.f.infer(ctx, i)
		release()
		done <- answer{err, time.Now()}
	}()
	return func() error {
		a := <-done
		if t.log != nil {
			t.log.add(requestRecord{timing: inference.Timing{ID: t.ids.Add(1), Sent: at, Done: a.at}, err: a.err, remote: true, server: i})
		}
		return a.err
	}, nil
}

// shmSet is a fleet's shared memory: one input region holding the batch,
// and one output region of slots, one per request in flight, both
// registered on every server under the same names. System shared memory is
// one POSIX shared-memory object each, which every server maps; CUDA shared
// memory is GPU memory of the suite's, an input and an output allocation per
// server, on that server's (first) GPU.
type shmSet struct {
	cuda            bool
	in, out         *client.SharedMemoryObject // system shared memory
	cudaIn, cudaOut []*client.CUDAMemory       // CUDA shared memory, by server
	inName, outName string
	reqs            []*client.InferRequest // one per output slot
	slots           slotPool
}

var shmSeq atomic.Uint64

// shmOutputBudget bounds the output slots of a load that does not bound the
// requests in flight (burst and open loads).
const shmOutputBudget = 256 << 20

// newSHMSet creates and registers f's regions: in CUDA shared memory when
// cuda is set, else in system shared memory.
func newSHMSet(ctx context.Context, f *fleet, in client.Tensor, cuda bool) (*shmSet, error) {
	shape, data := in.Shape, in.Data
	batch := int(shape[0])
	outBytes, err := f.model.outputBytes(batch)
	if err != nil {
		return nil, err
	}
	slots := f.shmSlots(outBytes)
	base := fmt.Sprintf("inferbench-suite-%d-%d", os.Getpid(), shmSeq.Add(1))
	s := &shmSet{cuda: cuda, inName: base + "-in", outName: base + "-out", slots: slotPool{n: slots}}
	if cuda {
		err = s.registerCUDA(ctx, f, data, int(outBytes)*slots)
	} else {
		err = s.registerSystem(ctx, f, data, int(outBytes)*slots)
	}
	if err != nil {
		return s, err // the fleet's close unregisters and frees what was made
	}
	inRegion := &client.Region{Name: s.inName, ByteSize: int64(len(data))}
	for k := range slots {
		req := &client.InferRequest{Model: f.model.name, OutputRegions: map[string]client.Region{},
			Inputs: []client.Tensor{{Name: f.model.input, Datatype: in.Datatype, Shape: shape, Region: inRegion}}}
		off := int64(k) * outBytes
		for _, o := range f.model.outputs {
			n := o.bytesPerImage * int64(batch)
			req.OutputRegions[o.name] = client.Region{Name: s.outName, Offset: off, ByteSize: n}
			off += n
		}
		s.reqs = append(s.reqs, req)
	}
	s.slots.free = make([]int, 0, slots)
	for k := slots - 1; k >= 0; k-- {
		s.slots.free = append(s.slots.free, k)
	}
	return s, nil
}

// shmSlots is how many output slots a shared-memory fleet needs for outputs
// of outBytes a request: one per request the load keeps in flight (or, when
// it bounds none, as many as fit in shmOutputBudget), and at least one per
// warm-up request, which are all in flight at once.
func (f *fleet) shmSlots(outBytes int64) int {
	slots := f.spec.outstanding
	if slots < 1 {
		slots = int(min(4096, max(1, shmOutputBudget/outBytes)))
	}
	warm := 0
	for _, c := range f.clients {
		n, _ := f.warmUpOn(c)
		warm += n
	}
	return max(slots, warm)
}

// registerSystem makes the two POSIX shared-memory objects, writes the
// input and registers both on every server.
func (s *shmSet) registerSystem(ctx context.Context, f *fleet, data []byte, outBytes int) error {
	var err error
	if s.in, err = client.CreateSharedMemory("/"+s.inName, len(data)); err != nil {
		return err
	}
	if s.out, err = client.CreateSharedMemory("/"+s.outName, outBytes); err != nil {
		return err
	}
	copy(s.in.Bytes(), data)
	for i, c := range f.clients {
		for _, r := range []*client.SharedMemoryObject{s.in, s.out} {
			name := strings.TrimPrefix(r.Key(), "/")
			if err := c.RegisterSystemSharedMemory(ctx, name, r.Key(), 0, uint64(len(r.Bytes()))); err != nil {
				return fmt.Errorf("server %d: registering shared memory: %w", i, err)
			}
			f.shm = s // so that close unregisters what was registered
		}
	}
	return nil
}

// registerCUDA allocates an input and an output on each server's GPU,
// writes the input and registers both there. A server the suite started
// with GPUs of its own (-servers on cuda: CUDA_VISIBLE_DEVICES) counts from
// its first GPU, the suite's i*devices, which it calls 0.
func (s *shmSet) registerCUDA(ctx context.Context, f *fleet, data []byte, outBytes int) error {
	for i, c := range f.clients {
		dev := 0
		if f.procs != nil && conf.servers != nil && f.spec.p.be == "cuda" {
			dev = i * f.spec.p.devices
		}
		in, err := client.AllocCUDA(dev, len(data))
		if err != nil {
			return err
		}
		s.cudaIn = append(s.cudaIn, in)
		out, err := client.AllocCUDA(dev, outBytes)
		if err != nil {
			return err
		}
		s.cudaOut = append(s.cudaOut, out)
		if err := in.Write(0, data); err != nil {
			return err
		}
		for _, r := range []struct {
			name string
			mem  *client.CUDAMemory
		}{{s.inName, in}, {s.outName, out}} {
			if err := c.RegisterCudaSharedMemory(ctx, r.name, r.mem.Handle(), 0, uint64(r.mem.Size())); err != nil {
				return fmt.Errorf("server %d: registering CUDA shared memory: %w", i, err)
			}
			f.shm = s // so that close unregisters what was registered
		}
	}
	return nil
}

// unregister removes the regions from every server.
func (s *shmSet) unregister(clients []wireClient) error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range clients {
		for _, name := range []string{s.inName, s.outName} {
			var err error
			if s.cuda {
				err = c.UnregisterCudaSharedMemory(ctx, name)
			} else {
				err = c.UnregisterSystemSharedMemory(ctx, name)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("unregistering %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// free removes the shared-memory objects or frees the GPU memory (after
// the servers let go of it).
func (s *shmSet) free() error {
	var errs []error
	for _, o := range []*client.SharedMemoryObject{s.in, s.out} {
		if o != nil {
			errs = append(errs, o.Close())
		}
	}
	for _, m := range append(s.cudaIn, s.cudaOut...) {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// slotPool hands out output slots: a free one, or, when more requests are
// in flight than there are slots, one in use (counted in shared: the two
// requests' outputs land in the same memory, which the suite never reads).
type slotPool struct {
	mu     sync.Mutex
	free   []int
	n      int
	next   int
	shared int
}

func (p *slotPool) get() (slot int, owned bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := len(p.free); k > 0 {
		slot = p.free[k-1]
		p.free = p.free[:k-1]
		return slot, true
	}
	p.shared++
	slot = p.next % p.n
	p.next++
	return slot, false
}

func (p *slotPool) put(slot int, owned bool) {
	if !owned {
		return
	}
	p.mu.Lock()
	p.free = append(p.free, slot)
	p.mu.Unlock()
}

// sharedSlots returns how many requests had to share a slot so far.
func (p *slotPool) sharedSlots() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shared
}
