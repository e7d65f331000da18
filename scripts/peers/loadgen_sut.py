#!/usr/bin/env python3
"""MLPerf LoadGen drives a running KServe v2 server (ours or any other).

A small system under test (SUT) for MLCommons' LoadGen (PyPI
``mlcommons-loadgen``), calling the server over gRPC with Triton's Python
client. LoadGen decides when queries are issued and measures their latency
(its clock: from issuing a query to the SUT's QuerySamplesComplete); this
script only answers them. It runs one scenario per call, in PerformanceOnly
mode, and leaves LoadGen's logs (mlperf_log_summary.txt, mlperf_log_detail.txt)
in --outdir.

The images live in one POSIX shared-memory region registered with the server
(Triton's system shared-memory extension), so a query's image is never
serialised:

- SingleStream: one 1-sample query at a time; the request names the sample's
  own image in the region, and its logits come back in the answer.
- Server: 1-sample queries at Poisson times at --server-qps, each sent
  asynchronously as it arrives (no limit on outstanding ones), with the
  sample's image named in the region; LoadGen judges the --latency-bound-ms
  99th percentile bound (VALID or INVALID).
- Offline: one query with all samples; the SUT cuts it into --batch-sample
  requests in LoadGen's order, gathers each request's images into a slot of a
  second region (a copy per image on this host, done by --inflight threads), keeps
  --inflight requests outstanding and gets the logits back in a third region.

The samples are --samples seeded random images of the model's input shape
(FP32, from the server's model metadata); accuracy mode is not run.
"""

import argparse
import os
import sys
import threading
import time
from multiprocessing import shared_memory

import mlperf_loadgen as lg
import numpy as np
import tritonclient.grpc as grpcclient


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="127.0.0.1:8001", help="the server's gRPC address")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--scenario", required=True, choices=["SingleStream", "Server", "Offline"])
    p.add_argument("--outdir", required=True, help="where LoadGen writes its logs")
    p.add_argument("--samples", type=int, default=512, help="images in the sample set (performance_sample_count)")
    p.add_argument("--duration-ms", type=int, default=10000, help="LoadGen's min_duration_ms")
    p.add_argument("--min-queries", type=int, default=100, help="LoadGen's min_query_count (SingleStream, Server)")
    p.add_argument("--server-qps", type=float, default=1000, help="Server: target queries per second")
    p.add_argument("--latency-bound-ms", type=float, default=10, help="Server: the 99th-percentile latency bound")
    p.add_argument("--offline-qps", type=float, default=20000, help="Offline: expected samples per second")
    p.add_argument("--batch-sample", type=int, default=256, help="Offline: images per request")
    p.add_argument("--inflight", type=int, default=8, help="Offline: requests outstanding (and gathering threads)")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


class Region:
    """A POSIX shared-memory object registered with the server (its name
    starts with inferbench serve's default -shm-key-prefix)."""

    def __init__(self, client, name, nbytes):
        self.name = name
        self.key = "/" + name
        try:
            shared_memory.SharedMemory(name=name).unlink()  # a leftover of an earlier run
        except FileNotFoundError:
            pass
        self.shm = shared_memory.SharedMemory(name=name, create=True, size=nbytes)
        self.client = client
        client.register_system_shared_memory(name, self.key, nbytes)

    def close(self):
        try:
            self.client.unregister_system_shared_memory(self.name)
        finally:
            self.shm.close()
            self.shm.unlink()


class SUT:
    def __init__(self, args):
        self.args = args
        self.client = grpcclient.InferenceServerClient(url=args.url)
        md = self.client.get_model_metadata(args.model)
        self.in_name = md.inputs[0].name
        dims = [int(d) for d in md.inputs[0].shape[1:]]
        if md.inputs[0].datatype != "FP32" or len(dims) != 3 or min(dims) < 1:
            raise SystemExit(f"input {self.in_name}: {md.inputs[0].datatype} {list(md.inputs[0].shape)}, want FP32 [-1, C, H, W]")
        self.out_name = md.outputs[0].name
        self.classes = int(md.outputs[0].shape[-1])
        self.dims = dims
        self.image_bytes = 4 * int(np.prod(dims))
        n = args.samples
        self.images = Region(self.client, f"inferbench-lg-in-{os.getpid()}", n * self.image_bytes)
        view = np.ndarray((n, *dims), dtype=np.float32, buffer=self.images.shm.buf)
        view[:] = np.random.default_rng(args.seed).random((n, *dims), dtype=np.float32)
        self.view = view
        self.regions = [self.images]
        self.errors = 0
        self.errors_lock = threading.Lock()
        if args.scenario == "Offline":
            b = args.batch_sample
            self.slots = Region(self.client, f"inferbench-lg-slots-{os.getpid()}", args.inflight * b * self.image_bytes)
            self.outs = Region(self.client, f"inferbench-lg-out-{os.getpid()}", args.inflight * b * 4 * self.classes)
            self.regions += [self.slots, self.outs]
            self.slot_view = np.ndarray((args.inflight, b, *dims), dtype=np.float32, buffer=self.slots.shm.buf)

    def close(self):
        for r in self.regions:
            r.close()
        self.client.close()

    def request(self, n, region, offset):
        inp = grpcclient.InferInput(self.in_name, [n, *self.dims], "FP32")
        inp.set_shared_memory(region, n * self.image_bytes, offset)
        return [inp]

    def failed(self, what):
        with self.errors_lock:
            self.errors += 1
            if self.errors <= 5:
                print(f"loadgen_sut: {what}", file=sys.stderr)

    # SingleStream: LoadGen waits for each query, so answer it at once.
    def issue_single(self, samples):
        for s in samples:
            try:
                self.client.infer(self.args.model, self.request(1, self.images.name, s.index * self.image_bytes))
            except Exception as e:  # noqa: BLE001 (the query is answered either way; the count is reported)
                self.failed(e)
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0)])

    # Server: every query goes out as it arrives.
    def issue_server(self, samples):
        for s in samples:
            def done(result, error, qid=s.id):
                if error is not None:
                    self.failed(error)
                lg.QuerySamplesComplete([lg.QuerySampleResponse(qid, 0, 0)])

            self.client.async_infer(self.args.model, self.request(1, self.images.name, s.index * self.image_bytes), done)

    # Offline: one query of every sample, cut into batches in LoadGen's order.
    def issue_offline(self, samples):
        samples = list(samples)
        b = self.args.batch_sample
        batches = [samples[i:i + b] for i in range(0, len(samples), b)]
        next_batch = iter(range(len(batches)))
        lock = threading.Lock()

        def worker(slot):
            while True:
                with lock:
                    i = next(next_batch, None)
                if i is None:
                    return
                batch = batches[i]
                n = len(batch)
                # One copy per image: np.take along axis 0 of these 4-D
                # arrays moved 1.1 GB/s a thread on the development machine,
                # row copies 12.7 GB/s (both release the GIL).
                dst = self.slot_view[slot]
                for j, s in enumerate(batch):
                    dst[j] = self.view[s.index]
                out = grpcclient.InferRequestedOutput(self.out_name)
                out.set_shared_memory(self.outs.name, n * 4 * self.classes, slot * b * 4 * self.classes)
                try:
                    self.client.infer(self.args.model, self.request(n, self.slots.name, slot * b * self.image_bytes), outputs=[out])
                except Exception as e:  # noqa: BLE001
                    self.failed(e)
                lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in batch])

        def dispatch():
            threads = [threading.Thread(target=worker, args=(k,)) for k in range(self.args.inflight)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        threading.Thread(target=dispatch, daemon=True).start()


def main(argv):
    args = parse_args(argv)
    os.makedirs(args.outdir, exist_ok=True)
    sut = SUT(args)
    settings = lg.TestSettings()
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = args.duration_ms
    settings.performance_sample_count_override = args.samples
    issue = {"SingleStream": sut.issue_single, "Server": sut.issue_server, "Offline": sut.issue_offline}[args.scenario]
    if args.scenario == "SingleStream":
        settings.scenario = lg.TestScenario.SingleStream
        settings.min_query_count = args.min_queries
    elif args.scenario == "Server":
        settings.scenario = lg.TestScenario.Server
        settings.server_target_qps = args.server_qps
        settings.server_target_latency_ns = int(args.latency_bound_ms * 1e6)
        settings.min_query_count = args.min_queries
    else:
        settings.scenario = lg.TestScenario.Offline
        settings.offline_expected_qps = args.offline_qps
    log = lg.LogSettings()
    log.log_output.outdir = args.outdir
    log.log_output.copy_summary_to_stdout = False
    qsl = lg.ConstructQSL(args.samples, args.samples, lambda idx: None, lambda idx: None)
    handle = lg.ConstructSUT(issue, lambda: None)
    start = time.monotonic()
    try:
        lg.StartTestWithLogSettings(handle, qsl, settings, log)
    finally:
        lg.DestroySUT(handle)
        lg.DestroyQSL(qsl)
        sut.close()
    summary = os.path.join(args.outdir, "mlperf_log_summary.txt")
    print(f"loadgen_sut: {args.scenario} done in {time.monotonic() - start:.1f} s, {sut.errors} failed requests; {summary}")
    with open(summary) as f:
        for line in f:
            if any(k in line for k in ("Result is", "Scheduled samples per second", "Samples per second",
                                       "Completed samples per second", "90.00 percentile latency",
                                       "99.00 percentile latency", "latency (ns)")):
                print("  " + line.rstrip())
    return 1 if sut.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
