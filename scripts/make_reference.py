#!/usr/bin/env python3
"""Write PyTorch reference models, inputs and float64 logits for inferbench's tests.

Needs torch, torchvision and safetensors (the GPU machine has them); runs on the CPU.

    python3 scripts/make_reference.py --out testdata/reference
    python3 scripts/make_reference.py --full /tmp/full      # full-size ResNet-18 case
    python3 scripts/make_reference.py --time-load /tmp/full/resnet18.pth

Every case is a BasicBlock ResNet with torchvision's module and key names (torchvision's
own BasicBlock; the stem and stage widths are free), random weights and non-trivial
batch-norm statistics (random gamma, beta, running mean and running variance). The model
is saved in float32 (or float16/bfloat16 where the case says so); the logits come from
the same weights in float64 (`model.double()`, eval mode) on a float32 input.

The output directory gets manifest.json (one entry per case: checkpoint file, format,
architecture, input shape, logits as exact JSON numbers), the checkpoints, and one
`<case>.io.safetensors` per case holding the input as "input" (float32, NCHW).
"""

import argparse
import copy
import json
import os
import statistics
import time

import torch
import torchvision
from safetensors.torch import save_file
from torch import nn
from torchvision.models.resnet import BasicBlock

# name, stem, widths, blocks, classes, (n, h, w), format, dtype
CASES = [
    ("s2_zip", 8, [8, 16], [1, 2], 5, (2, 33, 47), "zip", torch.float32),
    ("s3_legacy", 16, [16, 24, 32], [2, 1, 3], 10, (1, 64, 40), "legacy", torch.float32),
    ("s4_safetensors", 12, [12, 20, 28, 36], [1, 1, 2, 1], 7, (2, 45, 37), "safetensors", torch.float32),
    ("s4_zip", 16, [16, 24, 32, 40], [2, 2, 2, 2], 11, (2, 57, 63), "zip", torch.float32),
    ("s1_nested_module", 24, [16], [3], 4, (3, 32, 32), "zip-nested", torch.float32),
    ("s2_f16_zip", 8, [16, 8], [2, 1], 6, (2, 41, 35), "zip", torch.float16),
    ("s2_bf16_legacy", 10, [10, 14], [1, 1], 3, (1, 36, 50), "legacy", torch.bfloat16),
]


class Net(nn.Module):
    """torchvision's ResNet layout with free stem and stage widths."""

    def __init__(self, stem, widths, blocks, classes, in_channels=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, stem, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        inplanes = stem
        self.stages = len(widths)
        for s, (width, count) in enumerate(zip(widths, blocks)):
            layers = []
            for b in range(count):
                stride = 2 if (b == 0 and s > 0) else 1
                down = None
                if stride != 1 or inplanes != width:
                    down = nn.Sequential(
                        nn.Conv2d(inplanes, width, kernel_size=1, stride=stride, bias=False),
                        nn.BatchNorm2d(width),
                    )
                layers.append(BasicBlock(inplanes, width, stride, down))
                inplanes = width
            setattr(self, f"layer{s + 1}", nn.Sequential(*layers))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for s in range(self.stages):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def randomize(model, g):
    """Random weights and batch-norm statistics that keep activations near unit scale."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
            elif isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                m.bias.copy_(torch.randn(c, generator=g) * 0.2)
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.5)
                m.num_batches_tracked.fill_(int(torch.randint(1, 10000, (1,), generator=g)))
            elif isinstance(m, nn.Linear):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (1.0 / m.in_features) ** 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)


def logits64(model, x):
    m = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        return m(x.double())


def save(sd, path, fmt):
    if fmt == "zip":
        torch.save(sd, path)
    elif fmt == "legacy":
        torch.save(sd, path, _use_new_zipfile_serialization=False)
    elif fmt == "zip-nested":
        torch.save({"epoch": 3, "arch": "resnet", "state_dict": {"module." + k: v for k, v in sd.items()}}, path)
    elif fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in sd.items()}, path)
    else:
        raise ValueError(fmt)


def write_case(out, name, model, x, fmt, arch):
    ext = {"zip": ".pt", "legacy": ".pt", "zip-nested": ".pth", "safetensors": ".safetensors"}[fmt]
    ckpt = name + ext
    save(model.state_dict(), os.path.join(out, ckpt), fmt)
    y = logits64(model, x)
    io_file = name + ".io.safetensors"
    save_file({"input": x.contiguous()}, os.path.join(out, io_file))
    n, _, h, w = x.shape
    return {
        "name": name,
        "checkpoint": ckpt,
        "format": fmt,
        "arch": arch,
        "n": n,
        "h": h,
        "w": w,
        "inputs": io_file,
        "logits": [float(v) for v in y.flatten().tolist()],
        "max_abs_logit": float(y.abs().max()),
    }


def write_manifest(out, cases):
    manifest = {
        "generator": "scripts/make_reference.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cases": cases,
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def make_small(out):
    os.makedirs(out, exist_ok=True)
    cases = []
    for i, (name, stem, widths, blocks, classes, (n, h, w), fmt, dtype) in enumerate(CASES):
        g = torch.Generator().manual_seed(1000 + i)
        model = Net(stem, widths, blocks, classes).eval()
        randomize(model, g)
        model = model.to(dtype)
        x = torch.randn(n, 3, h, w, generator=g)
        arch = {"stem": stem, "widths": widths, "blocks": blocks, "classes": classes, "dtype": str(dtype)}
        cases.append(write_case(out, name, model, x, fmt, arch))
        print(f"{name}: {fmt} {dtype} max|logit| {cases[-1]['max_abs_logit']:.4g}")
    write_manifest(out, cases)


def make_full(out):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(18)
    model = torchvision.models.resnet18().eval()
    randomize(model, g)
    x = torch.randn(2, 3, 250, 250, generator=g)
    arch = {"stem": 64, "widths": [64, 128, 256, 512], "blocks": [2, 2, 2, 2], "classes": 1000, "dtype": "torch.float32"}
    case = write_case(out, "resnet18", model, x, "zip", arch)
    os.replace(os.path.join(out, "resnet18.pt"), os.path.join(out, "resnet18.pth"))
    case["checkpoint"] = "resnet18.pth"
    with torch.no_grad():
        y32 = model(x)
    y64 = torch.tensor(case["logits"], dtype=torch.float64).view(2, 1000)
    print(f"resnet18: max|logit| {case['max_abs_logit']:.4g}, torch fp32 vs fp64 max abs err {(y32.double() - y64).abs().max():.3g}")
    write_manifest(out, [case])


def time_load(path, reps):
    size = os.path.getsize(path)
    for kw in ({}, {"mmap": True}):
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            sd = torch.load(path, map_location="cpu", **kw)
            ts.append(time.perf_counter() - t)
            del sd
        print(f"torch.load({os.path.basename(path)}, {size} B, map_location='cpu', {kw}): "
              f"first {ts[0] * 1e3:.1f} ms, min {min(ts) * 1e3:.1f} ms, median {statistics.median(ts) * 1e3:.1f} ms over {reps}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="directory for the small reference cases")
    p.add_argument("--full", help="directory for the full-size ResNet-18 case")
    p.add_argument("--time-load", help="time torch.load of this checkpoint")
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    if a.out:
        make_small(a.out)
    if a.full:
        make_full(a.full)
    if a.time_load:
        time_load(a.time_load, a.reps)


if __name__ == "__main__":
    main()
