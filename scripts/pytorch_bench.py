#!/usr/bin/env python3
"""PyTorch side by side: measure torchvision ResNet-18 the way our Go suite
measures itself, and print the results in the Go benchmark format.

For every back-end (eager, torch.compile, the overlapped loop with CUDA graphs
of an eager or a max-autotuned model), precision (fp32, tf32, fp16) and batch
size this script:

1. Builds the model as our server does: a random-init resnet18() state dict
   is saved once to a temporary checkpoint (nothing is downloaded); a server
   loads it onto the GPU (load-ns), converts it (eval, fp16 + channels-last,
   torch.compile: setup-ns) and answers a first request (first-ns, which
   includes compilation); warmup-ns is the sum. Eager and graph build a new
   server every run; torch.compile (compile, graph-max) builds one per
   configuration (compiling is most of the time) and reports warm-up with its
   first run only.
2. Allocates one pinned 3x250x250 fp32 input batch, filled on the CPU with
   torch.randn, reused for every request (our suite allocates its input from
   the server, in pinned memory, the same way).
3. Burst load, as our BenchmarkServer with load=burst: one warm-up request
   is answered before anything is measured (the GPU utilisation sampler
   starts after it), then all N requests are put on a queue at once, each
   stamped with its own send time; one worker thread takes them in order and,
   on its own CUDA stream, copies the batch in, runs the model and copies the
   logits back to pinned memory, as our serial pipeline does.
   Stage times are measured the way our cuda back-end measures them: CUDA
   events recorded on the worker's stream around each stage (h2d-ns: the
   fp32 copy; compute-ns: the cast to fp16 and channels-last on the GPU and
   the forward pass, as our conversion runs inside our forward pass; d2h-ns:
   the logits' copy). queue-ns is host time from the send to the worker
   taking the request. Latency runs from each request's send to its logits
   on the host (queueing included); std-latency-ns is the population
   standard deviation (divided by n), as our suite's. Throughput is
   requests x batch / (last response - first send); sec/op is its inverse
   per request. gpu-util-pct (NVML, sampled every 10 ms) is reported only
   with at least one sample, with gpu-util-samples.
   With --backends graph the serving loop is the overlapped one
   (OverlapServer, named pipeline=overlap/graphs=on): three streams,
   --slots requests in flight, a CUDA graph per slot of the cast and the
   forward pass; stage times come from events on each stage's stream.
   --backends graph-max is the same loop around the model compiled by
   torch.compile(mode="max-autotune-no-cudagraphs") (the CUDA graphs are the
   loop's own, captured as graph's are); its first call, compilation and
   autotuning, runs on a side stream before the capture and is in first-ns.
4. Model only (BenchmarkForward): the input already on the GPU, the forward
   pass alone, synchronised per batch (graph and graph-max: one graph
   replay, the cast included). --backends compile-max measures only this,
   for torch.compile(mode="max-autotune"); its first call (compilation and
   autotuning) is first-ns on its first line.

The names are our suite's with backend=pytorch-eager, pytorch-compile,
pytorch-graph or pytorch-compile-max (names() builds them): compile-max and
graph-max share the model's name, graph-max's lines are told apart by
pipeline=overlap/graphs=on (BenchmarkServer) and graphs=on
(BenchmarkForward). So
    go tool benchstat -table '' -col /backend go.txt pytorch.txt
puts Go and PyTorch in one table. Needs a CUDA GPU, torch and torchvision.

Usage:
    python3 scripts/pytorch_bench.py --batches 1,32,256 --count 6 > results/<gpu>/pytorch.txt
    python3 scripts/pytorch_bench.py --backends graph,graph-max,compile-max --precisions fp16
"""

import argparse
import collections
import datetime
import math
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

UNITS = [
    ("samples/s", "higher"), ("req/s", "higher"),
    ("mean-latency-ns", "lower"), ("std-latency-ns", "lower"), ("min-latency-ns", "lower"),
    ("max-latency-ns", "lower"), ("p50-latency-ns", "lower"), ("p90-latency-ns", "lower"),
    ("p99-latency-ns", "lower"), ("p999-latency-ns", "lower"),
    ("warmup-ns", "lower"), ("load-ns", "lower"), ("setup-ns", "lower"), ("first-ns", "lower"),
    ("queue-ns", "lower"), ("h2d-ns", "lower"), ("compute-ns", "lower"), ("d2h-ns", "lower"),
    ("gpu-util-pct", "higher"), ("gpu-util-samples", "higher"),
]


# torch.compile's mode for each back-end that compiles (None: its default).
# graph-max's CUDA graphs are the overlapped loop's own, captured around the
# compiled model, so inductor must not make graphs of its own.
COMPILE_MODES = {"compile": None, "compile-max": "max-autotune", "graph-max": "max-autotune-no-cudagraphs"}
BACKENDS = ("eager", "compile", "graph", "compile-max", "graph-max")
OVERLAP = ("graph", "graph-max")  # the backends served by OverlapServer


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="eager,compile",
                   help="eager, compile (torch.compile's default mode), graph (the overlapped serving loop: "
                        "three streams, CUDA graphs, --slots requests in flight), compile-max "
                        "(torch.compile mode=max-autotune: its forward pass only), graph-max (graph's loop "
                        "around torch.compile mode=max-autotune-no-cudagraphs) (comma-separated)")
    p.add_argument("--slots", type=int, default=3,
                   help="graph, graph-max: requests in flight (copy-in, compute, copy-out)")
    p.add_argument("--batches", default="1,32,256", help="images per request")
    p.add_argument("--precisions", default="fp32,fp16", help="fp32, tf32, fp16")
    p.add_argument("--requests", type=int, default=100, help="requests per burst (our -benchtime Nx)")
    p.add_argument("--count", type=int, default=3, help="runs per configuration (our -count)")
    p.add_argument("--size", default="250x250", help="input HxW")
    p.add_argument("--forward-iters", type=int, default=50, help="model-only iterations per run (0 = skip)")
    p.add_argument("--procs", type=int, default=None,
                   help="GOMAXPROCS suffix to append to names, as Go does (default: usable CPUs)")
    p.add_argument("--no-header", action="store_true", help="do not print config and Unit lines (to append)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    unknown = [b for b in words(args.backends) if b not in BACKENDS]
    if unknown:
        p.error(f"--backends: unknown {', '.join(unknown)} (known: {', '.join(BACKENDS)})")
    return args


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def words(s):
    return [x.strip() for x in s.split(",") if x.strip()]


def names(backend, batch, precision, suffix=""):
    """Returns the BenchmarkServer and BenchmarkForward names of one
    configuration. graph-max is named by its model, as compile-max is
    (backend=pytorch-compile-max), and by its loop, as graph is
    (pipeline=overlap, graphs=on); its forward pass, a graph replay with the
    cast, gains graphs=on so that it is not taken for compile-max's."""
    model = "compile-max" if backend == "graph-max" else backend
    sub = f"backend=pytorch-{model}/batch={batch}"
    pipeline, graphs = ("overlap", "on") if backend in OVERLAP else ("serial", "off")
    server = (f"BenchmarkServer/{sub}/workers=1/pipeline={pipeline}/precision={precision}"
              f"/graphs={graphs}/devices=1/load=burst{suffix}")
    forward = f"BenchmarkForward/{sub}/precision={precision}"
    if backend == "graph-max":
        forward += "/graphs=on"
    return server, forward + suffix


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def driver_version():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def header(torch, torchvision, args):
    lines = [
        ("goos", "linux" if sys.platform.startswith("linux") else sys.platform),
        ("goarch", {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())),
        ("pkg", "github.com/inferbench/inferbench"),
        ("cpu", cpu_name()),
        ("gpu", torch.cuda.get_device_name(0)),
        ("driver", driver_version()),
        ("cuda", torch.version.cuda or ""),
        ("cudnn", str(torch.backends.cudnn.version() or "")),
        ("torch", torch.__version__),
        ("torchvision", torchvision.__version__),
        ("python", platform.python_version()),
        ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")),
        # The settings our suite records as config lines, where they apply.
        ("model", "resnet18"),
        ("size", args.size),
        ("checkpoint", "none"),
        ("seed", str(args.seed)),
        ("window", "off"),
    ]
    for k, v in lines:
        if v:
            print(f"{k}: {v}")
    for unit, better in UNITS:
        print(f"Unit {unit} better={better}")
    sys.stdout.flush()


class UtilSampler:
    """Samples NVML GPU utilisation every 10 ms on a thread, if pynvml exists."""

    def __init__(self):
        self.ok = False
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self.ok = True
        except Exception:  # pynvml missing or NVML unavailable: no gpu-util-pct
            pass

    def start(self):
        self.samples, self.stop_ev = [], threading.Event()
        if self.ok:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def _run(self):
        while not self.stop_ev.wait(0.01):
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def stop(self):
        """Returns (mean utilisation or None without a sample, samples), or
        None when NVML is not available."""
        if not self.ok:
            return None
        self.stop_ev.set()
        self.thread.join()
        n = len(self.samples)
        return (sum(self.samples) / n if n else None), n


class QueueServer:
    """What both serving loops share: requests arrive on self.requests as
    (input, send time, reply queue)."""

    def infer(self, inp):
        """Sends one request and waits for its Answer."""
        reply = queue.Queue(maxsize=1)
        self.requests.put((inp, time.perf_counter_ns(), reply))
        return reply.get()


class Server(QueueServer):
    """A minimal serving loop: a request queue and one worker thread that
    copies in, computes and copies out on its own stream (pipeline=serial,
    workers=1)."""

    def __init__(self, torch, model, batch, h, w, fp16):
        self.torch, self.model, self.fp16 = torch, model, fp16
        self.stream = torch.cuda.Stream()
        dtype = torch.float16 if fp16 else torch.float32
        fmt = torch.channels_last if fp16 else torch.contiguous_format
        self.x32 = torch.empty((batch, 3, h, w), device="cuda")
        self.x = torch.empty((batch, 3, h, w), device="cuda", dtype=dtype).to(memory_format=fmt)
        self.out = torch.empty((batch, 1000), pin_memory=True)
        self.requests = queue.Queue()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self):
        torch = self.torch
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        with torch.cuda.stream(self.stream), torch.inference_mode():
            while True:
                req = self.requests.get()
                if req is None:
                    return
                inp, sent, reply = req
                taken = time.perf_counter_ns()
                ev[0].record(self.stream)
                self.x32.copy_(inp, non_blocking=True)
                ev[1].record(self.stream)
                self.x.copy_(self.x32)  # cast and layout on the GPU
                logits = self.model(self.x)
                ev[2].record(self.stream)
                self.out.copy_(logits, non_blocking=True)
                ev[3].record(self.stream)
                self.stream.synchronize()
                done = time.perf_counter_ns()
                ms = [ev[i].elapsed_time(ev[i + 1]) for i in range(3)]
                reply.put(Answer(sent, taken, done, *(round(x * 1e6) for x in ms)))

    def close(self):
        self.requests.put(None)
        self.thread.join()


def fail_fast(run):
    """Runs a serving thread's loop; an exception in it ends the process
    (exit status 1) instead of leaving the callers waiting for ever."""
    try:
        run()
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


class OverlapServer(QueueServer):
    """The overlapped serving loop (pipeline=overlap, graphs=on): pinned
    input and output, three CUDA streams (copy-in, compute, copy-out) and
    `slots` requests in flight, each slot with its own device buffers and its
    own CUDA graph of the cast to the model's dtype and layout plus the
    forward pass. A dispatcher thread takes requests in order and enqueues a
    slot's three stages (each stream waiting for the previous stage's event);
    a completion thread waits for each request's copy-out, copies its logits
    out of the slot's pinned buffer (as our server delivers into the caller's
    memory) and frees the slot. So request k+1 is copied in while k
    computes and k-1 is copied out. A compiled model (graph-max) comes
    compiled (compile_first): its warm-up calls here only launch what was
    compiled, as the capture does."""

    def __init__(self, torch, model, batch, h, w, fp16, slots=3):
        self.torch = torch
        dtype = torch.float16 if fp16 else torch.float32
        fmt = torch.channels_last if fp16 else torch.contiguous_format
        self.s_in, self.s_comp, self.s_out = (torch.cuda.Stream() for _ in range(3))
        self.slots = []
        # Warm-up and capture on the compute stream, the pattern of
        # scripts/peers/pytriton_resnet.py (which runs at batch 256).
        with torch.cuda.stream(self.s_comp), torch.inference_mode():
            for _ in range(slots):
                x32 = torch.zeros((batch, 3, h, w), device="cuda")
                for _ in range(3):  # cuDNN's autotuning and first launches, outside the capture
                    model(x32.to(dtype).contiguous(memory_format=fmt))
                self.s_comp.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=self.s_comp):
                    logits = model(x32.to(dtype).contiguous(memory_format=fmt)).float()  # fp32 logits, as ours
                self.slots.append({
                    "x32": x32, "graph": g, "logits": logits, "free": threading.Semaphore(1),
                    "host": torch.empty((batch, 1000), dtype=logits.dtype, pin_memory=True),
                    "ev": [torch.cuda.Event(enable_timing=True) for _ in range(6)],
                })
        torch.cuda.synchronize()
        self.requests = queue.Queue()
        self.inflight = queue.Queue()
        self.dispatcher = threading.Thread(target=self._dispatch, daemon=True)
        self.completer = threading.Thread(target=self._complete, daemon=True)
        self.dispatcher.start()
        self.completer.start()

    def replay(self):
        """One forward pass (cast included) on the compute stream, for the
        model-only figure."""
        with self.torch.cuda.stream(self.s_comp):
            self.slots[0]["graph"].replay()
        self.s_comp.synchronize()

    def _dispatch(self):
        with self.torch.inference_mode():  # the slots' inputs are inference tensors
            fail_fast(self._dispatch_all)

    def _dispatch_all(self):
        torch, k = self.torch, 0
        while True:
            req = self.requests.get()
            if req is None:
                self.inflight.put(None)
                return
            slot = self.slots[k % len(self.slots)]
            k += 1
            slot["free"].acquire()
            taken = time.perf_counter_ns()
            ev = slot["ev"]
            with torch.cuda.stream(self.s_in):
                ev[0].record(self.s_in)
                slot["x32"].copy_(req[0], non_blocking=True)
                ev[1].record(self.s_in)
            with torch.cuda.stream(self.s_comp):
                self.s_comp.wait_event(ev[1])
                ev[2].record(self.s_comp)
                slot["graph"].replay()
                ev[3].record(self.s_comp)
            with torch.cuda.stream(self.s_out):
                self.s_out.wait_event(ev[3])
                ev[4].record(self.s_out)
                slot["host"].copy_(slot["logits"], non_blocking=True)
                ev[5].record(self.s_out)
            self.inflight.put((slot, req, taken))

    def _complete(self):
        fail_fast(self._complete_all)

    def _complete_all(self):
        while True:
            item = self.inflight.get()
            if item is None:
                return
            slot, (inp, sent, reply), taken = item
            ev = slot["ev"]
            ev[5].synchronize()
            slot["host"].numpy().copy()  # the logits copied out to the caller, as ours are
            done = time.perf_counter_ns()
            ns = [round(ev[i].elapsed_time(ev[i + 1]) * 1e6) for i in (0, 2, 4)]
            slot["free"].release()
            reply.put(Answer(sent, taken, done, *ns))

    def close(self):
        self.requests.put(None)
        self.dispatcher.join()
        self.completer.join()
        self.dispatcher = self.completer = None  # no cycle through the threads: the graphs go with the server
        self.torch.cuda.synchronize()


class Answer(collections.namedtuple("Answer", "sent taken done h2d compute d2h")):
    """One request's times: sent, taken (by the worker) and done (logits on
    the host) on the host clock, perf_counter_ns; h2d, compute and d2h in ns
    from CUDA events on the worker's stream."""


def percentile(sorted_vals, q):
    """Nearest-rank percentile of an ascending list: the value of rank
    ceil(q*n), as our suite's histogram reports (within 1/256)."""
    if not sorted_vals:
        return 0.0
    k = max(0, min(len(sorted_vals) - 1, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[k]


def summarize(answers):
    """Our suite's burst figures from a list of Answers."""
    n = len(answers)
    first = min(a.sent for a in answers)
    wall = max(a.done for a in answers) - first
    lat = sorted(a.done - a.sent for a in answers)
    return {
        "ns/op": wall / n,
        "req/s": n / (wall / 1e9),
        "mean-latency-ns": statistics.fmean(lat), "std-latency-ns": statistics.pstdev(lat),
        "min-latency-ns": lat[0], "max-latency-ns": lat[-1],
        "p50-latency-ns": percentile(lat, 0.50), "p90-latency-ns": percentile(lat, 0.90),
        "p99-latency-ns": percentile(lat, 0.99), "p999-latency-ns": percentile(lat, 0.999),
        "queue-ns": statistics.fmean(a.taken - a.sent for a in answers),
        "h2d-ns": statistics.fmean(a.h2d for a in answers),
        "compute-ns": statistics.fmean(a.compute for a in answers),
        "d2h-ns": statistics.fmean(a.d2h for a in answers),
    }


def burst(server, inp, n):
    """Puts n requests on the queue at once, each stamped with its own send
    time, and returns the figures once all are answered. The caller sends the
    warm-up request first."""
    replies = []
    for _ in range(n):
        r = queue.Queue(maxsize=1)
        server.requests.put((inp, time.perf_counter_ns(), r))
        replies.append(r)
    return summarize([r.get() for r in replies])


def fmt_line(name, n, metrics):
    parts = [name, str(n), f"{metrics.pop('ns/op'):.0f} ns/op"]
    for unit, _ in UNITS:
        if unit in metrics and metrics[unit] is not None:
            v = metrics[unit]
            parts.append(f"{v:.0f} {unit}" if unit.endswith("-ns") else f"{v:.2f} {unit}")
    return "\t".join(parts)


def build_model(torch, torchvision, ckpt, backend, precision):
    """Loads the checkpoint and prepares the model (eager for eager and
    graph, compiled in COMPILE_MODES' mode for the others); returns it with
    the load and setup times in ns. torch.compile is lazy: compiling happens
    at the first call."""
    t0 = time.perf_counter_ns()
    state = torch.load(ckpt, map_location="cuda", mmap=True, weights_only=True)
    with torch.device("meta"):
        model = torchvision.models.resnet18()
    model.load_state_dict(state, assign=True)
    torch.cuda.synchronize()
    t1 = time.perf_counter_ns()
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    model.eval()
    if precision == "fp16":
        model = model.half().to(memory_format=torch.channels_last)
    if backend in COMPILE_MODES:
        torch._dynamo.reset()  # nothing compiled before leaks into this one
        # Static shapes: every configuration has one batch size, and without
        # dynamic=False a process (or dynamo's on-disk profile) that has seen
        # two batch sizes compiles the batch dimension as dynamic, slower.
        model = torch.compile(model, mode=COMPILE_MODES[backend], dynamic=False)
    torch.cuda.synchronize()
    return model, t1 - t0, time.perf_counter_ns() - t1


def compile_first(torch, model, batch, h, w, fp16):
    """Calls a compiled model once, on a side stream, with an input made as
    OverlapServer makes its own (so no guard fails at its capture, where a
    recompilation would break it), and returns the call's host time in ns:
    compilation and autotuning, which torch.cuda.graph must not see."""
    dtype = torch.float16 if fp16 else torch.float32
    fmt = torch.channels_last if fp16 else torch.contiguous_format
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    t = time.perf_counter_ns()
    with torch.cuda.stream(side), torch.inference_mode():
        x32 = torch.zeros((batch, 3, h, w), device="cuda")
        model(x32.to(dtype).contiguous(memory_format=fmt))
    torch.cuda.synchronize()
    return time.perf_counter_ns() - t


def time_forward(torch, step, iters):
    """Mean host time of step() synchronised per call, after three
    unmeasured calls: the model-only figure, in ns."""
    with torch.inference_mode():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        for _ in range(iters):
            step()
            torch.cuda.synchronize()
        return (time.perf_counter_ns() - t) / iters


def forward_only(torch, torchvision, ckpt, args, batch, h, w, precision, name):
    """torch.compile(mode="max-autotune")'s forward pass, with no serving
    loop: the model is built and compiled once (its first call, autotuning
    included, is first-ns on the first run's line), then each run times
    --forward-iters passes over an input already on the GPU."""
    model, load_ns, setup_ns = build_model(torch, torchvision, ckpt, "compile-max", precision)
    dtype = torch.float16 if precision == "fp16" else torch.float32
    fmt = torch.channels_last if precision == "fp16" else torch.contiguous_format
    x = torch.randn(batch, 3, h, w, device="cuda").to(dtype=dtype, memory_format=fmt)
    t = time.perf_counter_ns()
    with torch.inference_mode():
        model(x)
    torch.cuda.synchronize()
    first = {"first-ns": time.perf_counter_ns() - t, "load-ns": load_ns, "setup-ns": setup_ns}
    for _ in range(args.count):
        ns = time_forward(torch, lambda: model(x), max(1, args.forward_iters))
        m = {"ns/op": ns, "samples/s": batch / (ns / 1e9)}
        m.update(first)
        first = {}
        print(fmt_line(name, max(1, args.forward_iters), m), flush=True)
    del model, x
    torch.cuda.empty_cache()


def main(argv):
    args = parse_args(argv)
    import torch
    import torchvision

    if not torch.cuda.is_available():
        print("pytorch_bench: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    h, w = (int(x) for x in args.size.split("x"))
    procs = args.procs if args.procs is not None else len(os.sched_getaffinity(0))
    suffix = f"-{procs}" if procs != 1 else ""
    if not args.no_header:
        header(torch, torchvision, args)

    tmp = tempfile.mkdtemp(prefix="pytorch_bench")
    ckpt = os.path.join(tmp, "resnet18-random.pth")
    torch.save(torchvision.models.resnet18().state_dict(), ckpt)
    sampler = UtilSampler()

    for backend in words(args.backends):
        for precision in words(args.precisions):
            for batch in ints(args.batches):
                server_name, fwd_name = names(backend, batch, precision, suffix)
                if backend == "compile-max":
                    forward_only(torch, torchvision, ckpt, args, batch, h, w, precision, fwd_name)
                    continue
                inp = torch.randn(batch, 3, h, w).pin_memory()
                server = model = None
                for run in range(args.count):
                    # Eager and graph build their server every run, as each
                    # of our benchmark runs does, so warm-up is measured per
                    # run. torch.compile (compile, graph-max) would spend
                    # most of the time compiling: it builds once per
                    # configuration and reports warm-up with its first run
                    # only.
                    warm = {}
                    if server is None or backend in ("eager", "graph"):
                        if server is not None:
                            server.close()
                        model, load_ns, setup_ns = build_model(torch, torchvision, ckpt, backend, precision)
                        first_ns = 0
                        if backend == "graph-max":  # compiled before the capture
                            first_ns = compile_first(torch, model, batch, h, w, precision == "fp16")
                        t = time.perf_counter_ns()
                        if backend in OVERLAP:
                            server = OverlapServer(torch, model, batch, h, w, precision == "fp16", args.slots)
                        else:
                            server = Server(torch, model, batch, h, w, precision == "fp16")
                        setup_ns += time.perf_counter_ns() - t  # buffers, streams, graph capture
                        t = time.perf_counter_ns()
                        server.infer(inp)
                        first_ns += time.perf_counter_ns() - t
                        warm = {"warmup-ns": load_ns + setup_ns + first_ns, "load-ns": load_ns,
                                "setup-ns": setup_ns, "first-ns": first_ns}
                    server.infer(inp)  # the warm-up request, outside every figure
                    sampler.start()
                    m = burst(server, inp, args.requests)
                    util = sampler.stop()
                    if util is not None:
                        m["gpu-util-pct"], m["gpu-util-samples"] = util
                    m["samples/s"] = m["req/s"] * batch
                    m.update(warm)
                    print(fmt_line(server_name, args.requests, m), flush=True)

                    if args.forward_iters > 0:
                        if backend in OVERLAP:
                            step = server.replay
                        else:
                            x = server.x
                            step = lambda: model(x)  # noqa: E731
                        ns = time_forward(torch, step, args.forward_iters)
                        print(fmt_line(fwd_name, args.forward_iters,
                                       {"ns/op": ns, "samples/s": batch / (ns / 1e9)}), flush=True)
                server.close()
                del server, model, inp
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
