#!/usr/bin/env python3
"""PyTriton (Triton with its Python back-end) on our GPU: torchvision's
ResNet-18, the peer scripts/peers/gpu-triton.sh measures beside ours.

PyTriton (PyPI ``nvidia-pytriton``) bundles NVIDIA's Triton Inference Server
and runs a Python function as a model behind Triton's HTTP and gRPC front
doors, its dynamic batcher and its shared-memory extensions. This script
serves torchvision's ResNet-18 (random weights, seeded: speed does not depend
on them) under the same names and shapes as ``inferbench serve``: model
``resnet18``, input ``input`` FP32 [-1, 3, H, W], output ``logits`` FP32
[-1, 1000], max_batch_size 256.

The forward pass is written as well as we know how: fp16 weights in
channels-last layout, cuDNN autotuning on, one CUDA graph per bucket batch
size (1, 2, 4, ... 256, captured at start), the request's images copied into
a pinned buffer and from there to the GPU on the instance's own stream, the
fp32-to-fp16 conversion inside the graph, the logits copied back as fp32 into
pinned memory. A batch of n images runs in the smallest bucket that holds it
(the rest of the bucket is zeros). --instances model instances (Triton runs
each in its own thread) each own a stream, buffers and graphs, so copies and
compute of different batches overlap.

usage: python3 scripts/peers/pytriton_resnet.py [--http-port 8100 --grpc-port 8101
       --metrics-port 8102 --size 250 --instances 2 --queue-delay-us 100]
It prints "serving" when Triton is ready and serves until SIGINT or SIGTERM;
then it prints, per instance and batch size, the mean time of the model
function (so the rest of the latency can be told to be Triton's and PyTriton's).
"""

import argparse
import signal
import sys
import threading
import time

import numpy as np
import torch
import torchvision
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


class Instance:
    """One model instance: its stream, pinned buffers and CUDA graphs."""

    def __init__(self, model, size, device):
        self.stream = torch.cuda.Stream(device)
        h = w = size
        self.host_in = torch.empty((BUCKETS[-1], 3, h, w), dtype=torch.float32).pin_memory()
        self.host_out = torch.empty((BUCKETS[-1], 1000), dtype=torch.float32).pin_memory()
        self.graphs = {}
        self.calls = {}  # batch size -> [calls, seconds in __call__, seconds copying into host_in]
        with torch.cuda.stream(self.stream), torch.inference_mode():
            for b in BUCKETS:
                x = torch.zeros((b, 3, h, w), dtype=torch.float32, device=device)
                for _ in range(3):  # autotune and warm up before capture
                    model(x.half().contiguous(memory_format=torch.channels_last))
                self.stream.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=self.stream):
                    y = model(x.half().contiguous(memory_format=torch.channels_last)).float()
                self.graphs[b] = (g, x, y)
        self.stream.synchronize()

    @torch.inference_mode()
    def __call__(self, images):
        start = time.perf_counter()
        n = images.shape[0]
        b = next(k for k in BUCKETS if k >= n)
        g, x, y = self.graphs[b]
        self.host_in[:n].copy_(torch.from_numpy(images))
        copied = time.perf_counter()
        with torch.cuda.stream(self.stream):
            x[:n].copy_(self.host_in[:n], non_blocking=True)
            g.replay()
            self.host_out[:n].copy_(y[:n], non_blocking=True)
        self.stream.synchronize()
        out = self.host_out[:n].numpy().copy()
        c = self.calls.setdefault(n, [0, 0.0, 0.0])
        c[0] += 1
        c[1] += time.perf_counter() - start
        c[2] += copied - start
        return out

    def report(self, i):
        """Prints, per batch size, the mean time PyTriton's call of this
        instance took (the rest of a request's latency is Triton's and
        PyTriton's own)."""
        for n, (calls, total, copy) in sorted(self.calls.items()):
            print(f"pytriton_resnet: instance {i} batch {n}: {calls} calls, {1e3 * total / calls:.3f} ms mean in the model function "
                  f"({1e3 * copy / calls:.3f} ms of it copying the request's images into the pinned buffer)", flush=True)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--http-port", type=int, default=8100)
    p.add_argument("--grpc-port", type=int, default=8101)
    p.add_argument("--metrics-port", type=int, default=8102)
    p.add_argument("--size", type=int, default=250, help="input height and width in pixels")
    p.add_argument("--instances", type=int, default=2, help="model instances, each with its own stream")
    p.add_argument("--queue-delay-us", type=int, default=100, help="the dynamic batcher's max_queue_delay_microseconds")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda", 0)
    model = torchvision.models.resnet18().eval().half().to(device).to(memory_format=torch.channels_last)
    start = time.monotonic()
    instances = [Instance(model, args.size, device) for _ in range(args.instances)]
    print(f"pytriton_resnet: {args.instances} instances, graphs for {BUCKETS} captured in {time.monotonic() - start:.1f} s", flush=True)

    def infer_func(inst):
        @batch
        def infer(input):
            return {"logits": inst(input)}

        return infer

    cfg = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
                       http_address="127.0.0.1", grpc_address="127.0.0.1", metrics_address="127.0.0.1")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    # PyTriton guards shared memory and statistics with a token by default;
    # Triton itself does not, and perf_analyzer uses both.
    security = TritonSecurityConfig(restricted_endpoints=["model-repository", "trace", "logging"])
    with Triton(config=cfg, security_config=security) as triton:
        triton.bind(
            model_name="resnet18",
            infer_func=[infer_func(i) for i in instances],
            inputs=[Tensor(name="input", dtype=np.float32, shape=(3, args.size, args.size))],
            outputs=[Tensor(name="logits", dtype=np.float32, shape=(1000,))],
            config=ModelConfig(max_batch_size=BUCKETS[-1],
                               batcher=DynamicBatcher(max_queue_delay_microseconds=args.queue_delay_us)),
            strict=True,
        )
        triton.run()
        print("serving", flush=True)
        stop.wait()
    for i, inst in enumerate(instances):
        inst.report(i)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
