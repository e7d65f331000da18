#!/usr/bin/env python3
"""CPU side by side: PyTorch's and onnxruntime's ResNet-18 forward pass on the
CPU, measured as our BenchmarkForward (inference/cpu) measures ours and
printed in the Go benchmark format with the same names, so that

    go tool benchstat -col /backend cpu.txt

puts backend=cpu (ours), backend=pytorch and backend=onnxruntime side by side.

1. The model is torchvision's resnet18() with random weights (nothing is
   downloaded) in eval mode, fp32, as our benchmark uses a seeded ResNet-18.
   --export DIR writes it as ONNX, one file per batch size
   (DIR/resnet18-b<B>.onnx, fixed shapes), for the onnxruntime runs.
2. One process measures one back-end at one thread count (--threads), for
   every batch size: PyTorch with torch.set_num_threads(T) and one inter-op
   thread, onnxruntime with intra_op_num_threads=T, sequential execution and
   all graph optimisations, on its CPU execution provider. Pin the process
   to T CPUs with taskset, as scripts/cpu-compare.sh does; the script does
   not pin itself.
3. Per batch size: one random input [B, 3, H, W] fp32, made once, and
   --warmup forward passes (not timed); then --count times, for each batch
   size in turn, forward passes until --benchtime seconds have passed (at
   least --min-iters). ns/op and ms/batch are the mean wall
   time of a pass (time.perf_counter_ns around the loop), images/s is
   B * passes / that time, peak-rss-MB the process's VmHWM over the timed
   passes (reset just before them, as our benchmark resets it per
   sub-benchmark; the models and inputs of every batch size are resident).
4. The output is a Go benchmark file: the config lines of our test binary
   (goos, goarch, pkg, cpu: pass --cpu with the exact value our binary
   prints so that benchstat keeps one table), versions as comment lines,
   then one line per batch size named
   BenchmarkForward/backend=<pytorch|pytorch-cl|onnxruntime>/threads=T/batch=B-T
   (no -T suffix for T=1, as Go prints it). pytorch-cl is PyTorch with the
   model and input in channels-last memory format.

Usage (on a machine with torch, torchvision and onnxruntime):
    python3 scripts/pytorch_cpu_bench.py --export /tmp/onnx --batches 1,8
    taskset -c 0,1 python3 scripts/pytorch_cpu_bench.py --backend pytorch --threads 2
    taskset -c 0,1 python3 scripts/pytorch_cpu_bench.py --backend onnxruntime --threads 2 --onnx /tmp/onnx
"""

import argparse
import os
import platform
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="pytorch", choices=["pytorch", "pytorch-cl", "onnxruntime"])
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (pin the process to as many CPUs)")
    p.add_argument("--batches", default="1,8", help="images per forward pass, comma-separated")
    p.add_argument("--size", default="250x250", help="input HxW")
    p.add_argument("--warmup", type=int, default=3, help="untimed passes per batch size")
    p.add_argument("--benchtime", type=float, default=1.0, help="seconds of timed passes per batch size")
    p.add_argument("--min-iters", type=int, default=3, help="at least this many timed passes")
    p.add_argument("--count", type=int, default=1, help="measure every batch size this many times (our -test.count)")
    p.add_argument("--onnx", default="", help="directory of the exported models (onnxruntime)")
    p.add_argument("--export", default="", help="write the ONNX models to this directory and exit")
    p.add_argument("--cpu", default="", help="value of the cpu: config line (default: /proc/cpuinfo's model name)")
    p.add_argument("--no-header", action="store_true", help="print only benchmark lines")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def reset_peak_rss():
    """Resets the process's VmHWM to what is resident now (Linux); reports
    whether that worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb():
    """The process's peak resident set size in MiB (VmHWM), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def model(torch, torchvision, seed):
    torch.manual_seed(seed)
    return torchvision.models.resnet18(weights=None).eval()


def export(args, h, w):
    import torch
    import torchvision

    os.makedirs(args.export, exist_ok=True)
    m = model(torch, torchvision, args.seed)
    for b in ints(args.batches):
        path = os.path.join(args.export, f"resnet18-b{b}.onnx")
        x = torch.randn(b, 3, h, w)
        try:
            torch.onnx.export(m, (x,), path, input_names=["x"], output_names=["logits"], dynamo=False)
        except Exception as e:  # the TorchScript exporter is gone or failed: use the dynamo one
            print(f"# TorchScript ONNX export failed ({e!r}); using dynamo=True", file=sys.stderr)
            torch.onnx.export(m, (x,), path, input_names=["x"], output_names=["logits"], dynamo=True)
        print(f"# wrote {path}", file=sys.stderr)


def pytorch_runner(args, batch, h, w):
    import torch
    import torchvision

    m = model(torch, torchvision, args.seed)
    x = torch.randn(batch, 3, h, w)
    if args.backend == "pytorch-cl":
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)

    def run():
        with torch.inference_mode():
            m(x)

    return run


def onnx_runner(args, batch, h, w):
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    path = os.path.join(args.onnx, f"resnet18-b{batch}.onnx")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(args.seed).standard_normal((batch, 3, h, w), dtype=np.float32)

    def run():
        sess.run(None, {"x": x})

    return run


def versions(backend):
    out = [f"python {platform.python_version()}"]
    if backend.startswith("pytorch"):
        import torch
        import torchvision

        out += [f"torch {torch.__version__}", f"torchvision {torchvision.__version__}",
                f"torch threads {torch.get_num_threads()}, inter-op {torch.get_num_interop_threads()}",
                f"mkldnn {torch.backends.mkldnn.is_available()}"]
    else:
        import onnxruntime

        out.append(f"onnxruntime {onnxruntime.__version__}")
    return out


def main(argv):
    args = parse_args(argv)
    h, w = (int(v) for v in args.size.split("x"))
    if args.export:
        export(args, h, w)
        return 0
    if args.threads < 1:
        print("--threads must be at least 1", file=sys.stderr)
        return 2
    if args.backend.startswith("pytorch"):
        import torch

        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
        make = pytorch_runner
    else:
        if not args.onnx:
            print("--onnx DIR is needed for onnxruntime (see --export)", file=sys.stderr)
            return 2
        make = onnx_runner
    if not args.no_header:
        print("goos: linux" if sys.platform.startswith("linux") else f"goos: {sys.platform}")
        print("goarch: " + {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine()))
        print("pkg: github.com/inferbench/inferbench/inference/cpu")
        print("cpu: " + (args.cpu or cpu_name()))
    for v in versions(args.backend):
        print(f"# {args.backend}: {v}")
    suffix = f"-{args.threads}" if args.threads != 1 else ""
    runs = [(batch, make(args, batch, h, w)) for batch in ints(args.batches)]
    for batch, run in runs:
        for _ in range(args.warmup):
            run()
    for _ in range(args.count):
        for batch, run in runs:
            reset = reset_peak_rss()
            iters = 0
            start = time.perf_counter_ns()
            while True:
                run()
                iters += 1
                elapsed = time.perf_counter_ns() - start
                if iters >= args.min_iters and elapsed >= args.benchtime * 1e9:
                    break
            per = elapsed / iters
            name = f"BenchmarkForward/backend={args.backend}/threads={args.threads}/batch={batch}{suffix}"
            line = f"{name}\t{iters}\t{per:.0f} ns/op\t{batch * 1e9 / per:.4g} images/s\t{per / 1e6:.4g} ms/batch"
            rss = peak_rss_mb()
            if rss is not None and reset:
                line += f"\t{rss:.1f} peak-rss-MB"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
