#!/usr/bin/env python3
"""Print a Markdown table of two Go benchmark files side by side.

usage: side_by_side.py A.txt B.txt [--names A,B] [--units samples/s,p50-latency-ns,p99-latency-ns]

Results are matched on batch, load, concurrency and transport (the keys both
perf_analyzer's lines from pa2bench and the suite's -target lines carry; the
GOMAXPROCS suffix and other keys are ignored). A point only one file has is
listed with "-" on the other side; latencies are printed in milliseconds,
and the last column is B's throughput over A's.
"""

import argparse
import re
import sys


def read(path):
    out = {}
    for line in open(path):
        if not line.startswith("Benchmark"):
            continue
        f = line.split()
        name = re.sub(r"-[0-9]+$", "", f[0])
        keys = dict(kv.split("=", 1) for kv in name.split("/")[1:] if "=" in kv)
        point = (int(keys.get("batch", 0)), keys.get("load", ""), int(keys.get("concurrency", 0) or 0), keys.get("transport", ""))
        vals = {f[i + 1]: float(f[i]) for i in range(2, len(f) - 1, 2)}
        out[point] = vals
    return out


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--names", default="A,B")
    p.add_argument("--units", default="samples/s,p50-latency-ns,p99-latency-ns")
    args = p.parse_args(argv)
    na, nb = args.names.split(",")
    units = args.units.split(",")
    a, b = read(args.a), read(args.b)

    def cell(d, u):
        if d is None or u not in d:
            return "-"
        v = d[u]
        return f"{v / 1e6:.3f}" if u.endswith("-ns") else f"{v:,.0f}"

    head = ["transport", "batch", "concurrency"]
    for u in units:
        label = u.replace("-latency-ns", " latency (ms)")
        head += [f"{label}, {na}", f"{label}, {nb}"]
    head.append(f"{nb} / {na} samples/s")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for point in sorted(set(a) | set(b), key=lambda k: (k[3], k[0], k[1], k[2])):
        da, db = a.get(point), b.get(point)
        row = [point[3], str(point[0]), str(point[2])]
        for u in units:
            row += [cell(da, u), cell(db, u)]
        if da and db and da.get("samples/s") and "samples/s" in db:
            row.append(f"{db['samples/s'] / da['samples/s']:.2f}")
        else:
            row.append("-")
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
