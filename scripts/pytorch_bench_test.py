"""Tests of pytorch_bench.py's figures, without torch:

    python3 -m unittest discover -s scripts -p 'pytorch_bench_test.py'
"""

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


if __name__ == "__main__":
    unittest.main()
