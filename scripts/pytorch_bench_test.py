"""Tests of pytorch_bench.py's figures, without torch:

    python3 -m unittest discover -s scripts -p 'pytorch_bench_test.py'
"""

import contextlib
import io
import math
import unittest

import pytorch_bench as pb

MS = 1_000_000


class SummarizeTest(unittest.TestCase):
    def test_burst_figures_match_our_suites_definitions(self):
        # Three requests sent 0, 1 and 2 ms into the burst, answered at 2, 4
        # and 6 ms: latency from each request's own send.
        answers = [
            pb.Answer(sent=0, taken=0, done=2 * MS, h2d=100, compute=1 * MS, d2h=50),
            pb.Answer(sent=1 * MS, taken=2 * MS, done=4 * MS, h2d=200, compute=2 * MS, d2h=50),
            pb.Answer(sent=2 * MS, taken=4 * MS, done=6 * MS, h2d=300, compute=3 * MS, d2h=50),
        ]
        m = pb.summarize(answers)
        self.assertEqual(m["min-latency-ns"], 2 * MS)
        self.assertEqual(m["max-latency-ns"], 4 * MS)
        self.assertAlmostEqual(m["mean-latency-ns"], 3 * MS)
        # Latencies 2, 3, 4 ms: population standard deviation sqrt(2/3) ms
        # (the sample one, divided by n-1, would be 1 ms).
        self.assertAlmostEqual(m["std-latency-ns"], math.sqrt(2 / 3) * MS)
        self.assertEqual(m["p50-latency-ns"], 3 * MS)
        self.assertEqual(m["p99-latency-ns"], 4 * MS)
        # Throughput over last response - first send: 3 requests in 6 ms.
        self.assertAlmostEqual(m["req/s"], 500)
        self.assertAlmostEqual(m["ns/op"], 2 * MS)
        self.assertAlmostEqual(m["queue-ns"], 1 * MS)
        self.assertAlmostEqual(m["h2d-ns"], 200)
        self.assertAlmostEqual(m["compute-ns"], 2 * MS)
        self.assertAlmostEqual(m["d2h-ns"], 50)

    def test_percentile_is_nearest_rank(self):
        vals = list(range(1, 101))
        self.assertEqual(pb.percentile(vals, 0.5), 50)
        self.assertEqual(pb.percentile(vals, 0.9), 90)
        self.assertEqual(pb.percentile(vals, 0.99), 99)
        self.assertEqual(pb.percentile(vals, 0.999), 100)
        self.assertEqual(pb.percentile([7], 0.5), 7)
        self.assertEqual(pb.percentile([], 0.5), 0.0)


class FormatTest(unittest.TestCase):
    def test_unmeasured_figures_are_left_out(self):
        line = pb.fmt_line("BenchmarkServer/backend=pytorch-eager", 3,
                           {"ns/op": 10, "gpu-util-pct": None, "gpu-util-samples": 0, "p50-latency-ns": 5})
        self.assertNotIn("gpu-util-pct", line)
        self.assertIn("0.00 gpu-util-samples", line)
        self.assertIn("5 p50-latency-ns", line)


class NamesTest(unittest.TestCase):
    def test_names(self):
        cases = {
            "eager": ("BenchmarkServer/backend=pytorch-eager/batch=32/workers=1/pipeline=serial/precision=fp16"
                      "/graphs=off/devices=1/load=burst-16",
                      "BenchmarkForward/backend=pytorch-eager/batch=32/precision=fp16-16"),
            "graph": ("BenchmarkServer/backend=pytorch-graph/batch=32/workers=1/pipeline=overlap/precision=fp16"
                      "/graphs=on/devices=1/load=burst-16",
                      "BenchmarkForward/backend=pytorch-graph/batch=32/precision=fp16-16"),
            "compile-max": (None, "BenchmarkForward/backend=pytorch-compile-max/batch=32/precision=fp16-16"),
            # Named by its model, as compile-max, and by its loop, as graph;
            # its forward pass is a graph replay, not compile-max's.
            "graph-max": ("BenchmarkServer/backend=pytorch-compile-max/batch=32/workers=1/pipeline=overlap"
                          "/precision=fp16/graphs=on/devices=1/load=burst-16",
                          "BenchmarkForward/backend=pytorch-compile-max/batch=32/precision=fp16/graphs=on-16"),
        }
        for backend, (server, forward) in cases.items():
            with self.subTest(backend=backend):
                got_server, got_forward = pb.names(backend, 32, "fp16", "-16")
                if server is not None:  # compile-max prints no server line
                    self.assertEqual(got_server, server)
                self.assertEqual(got_forward, forward)

    def test_printed_names_are_distinct(self):
        printed = []
        for backend in pb.BACKENDS:
            server, forward = pb.names(backend, 1, "fp16")
            if backend != "compile-max":
                printed.append(server)
            printed.append(forward)
        self.assertEqual(len(printed), len(set(printed)), printed)

    def test_graph_max_serves_its_own_graphs(self):
        self.assertIn("graph-max", pb.OVERLAP)
        # Inductor's own CUDA graphs would be captured inside the loop's.
        self.assertEqual(pb.COMPILE_MODES["graph-max"], "max-autotune-no-cudagraphs")
        self.assertEqual(pb.COMPILE_MODES["compile-max"], "max-autotune")


class ArgsTest(unittest.TestCase):
    def test_backends(self):
        args = pb.parse_args(["--backends", "graph,graph-max,compile-max", "--slots", "4"])
        self.assertEqual(pb.words(args.backends), ["graph", "graph-max", "compile-max"])
        self.assertEqual(args.slots, 4)
        self.assertEqual(pb.words(pb.parse_args([]).backends), ["eager", "compile"])

    def test_unknown_backend_is_refused(self):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), self.assertRaises(SystemExit):
            pb.parse_args(["--backends", "graph,graph-maxx"])
        self.assertIn("unknown graph-maxx", stderr.getvalue())


if __name__ == "__main__":
    unittest.main()
