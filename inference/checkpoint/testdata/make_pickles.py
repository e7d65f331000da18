#!/usr/bin/env python3
"""Write pickle-p{1,2,4,5}.pkl: the same torch-style state dict in pickle protocols 1-5,
and pickle-resnet152.pkl: the data.pkl that torch.save(torchvision.models.resnet152().state_dict())
writes, with the same structure (protocol 2, memo, the _metadata attribute, one backward-hooks
OrderedDict per tensor, storage keys "0".."931" in state-dict order).

Runs without torch: stand-in globals carry torch's module and function names, so the
pickles hold exactly the GLOBAL/STACK_GLOBAL names torch.save writes. The dict holds
  "w":     _rebuild_tensor_v2 of FloatStorage "0" (6 elements), size (2, 3), stride (3, 1)
  "p":     _rebuild_parameter(_rebuild_tensor_v2 of HalfStorage "1", offset 1, size (2,)), True, {})
  "t":     _rebuild_tensor_v2 of FloatStorage "0", size (3, 2), stride (1, 3)  (a transposed view)
  "meta":  {"epoch": 3, "lr": 0.1, "name": "x", "tags": ["a", "b"], "big": 2**70}
and pickle-p0-meta.pkl holds "meta" alone in protocol 0 (text opcodes; protocol 0 cannot
carry torch's tuple persistent IDs). Read by checkpoint's TestPickleProtocols; pickle-resnet152.pkl
by TestResNet152Shaped, which builds the same key list from the architecture in Go.
"""
import collections
import os
import pickle
import sys
import types

torch = types.ModuleType("torch")
utils = types.ModuleType("torch._utils")
sys.modules["torch"] = torch
sys.modules["torch._utils"] = utils


def _rebuild_tensor_v2(*args):
    raise NotImplementedError


def _rebuild_parameter(*args):
    raise NotImplementedError


for f in (_rebuild_tensor_v2, _rebuild_parameter):
    f.__module__ = "torch._utils"
    setattr(utils, f.__name__, f)


class FloatStorage:
    pass


class HalfStorage:
    pass


class LongStorage:
    pass


for c in (FloatStorage, HalfStorage, LongStorage):
    c.__module__ = "torch"
    c.__qualname__ = c.__name__
    setattr(torch, c.__name__, c)


class Storage:
    def __init__(self, kind, key, numel):
        self.kind, self.key, self.numel = kind, key, numel


class Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, tuple(size), tuple(stride), False, collections.OrderedDict())

    def __reduce__(self):
        return (_rebuild_tensor_v2, self.args)


class Parameter:
    def __init__(self, t):
        self.t = t

    def __reduce__(self):
        return (_rebuild_parameter, (self.t, True, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.kind, obj.key, "cpu", obj.numel)
        return None


def contiguous(shape):
    stride, n = [], 1
    for d in reversed(shape):
        stride.insert(0, n)
        n *= d
    return stride


def resnet152():
    """torchvision.models.resnet152().state_dict() as (name, storage type, shape), in order,
    and its _metadata: every module's prefix with its _version (2 for batch norm, 1 otherwise),
    in the preorder state_dict() visits them."""
    tensors, meta = [], collections.OrderedDict()

    def module(prefix, version=1):
        meta[prefix] = {"version": version}

    def conv(prefix, out, inp, k):
        module(prefix)
        tensors.append((prefix + ".weight", FloatStorage, [out, inp, k, k]))

    def bn(prefix, c):
        module(prefix, 2)
        for p in ("weight", "bias", "running_mean", "running_var"):
            tensors.append((f"{prefix}.{p}", FloatStorage, [c]))
        tensors.append((prefix + ".num_batches_tracked", LongStorage, []))

    module("")
    conv("conv1", 64, 3, 7)
    bn("bn1", 64)
    module("relu")
    module("maxpool")
    inp = 64
    for layer, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 8, 36, 3)), 1):
        module(f"layer{layer}")
        for b in range(blocks):
            p = f"layer{layer}.{b}"
            module(p)
            conv(p + ".conv1", width, inp, 1)
            bn(p + ".bn1", width)
            conv(p + ".conv2", width, width, 3)
            bn(p + ".bn2", width)
            conv(p + ".conv3", 4 * width, width, 1)
            bn(p + ".bn3", 4 * width)
            module(p + ".relu")
            if b == 0:
                module(p + ".downsample")
                conv(p + ".downsample.0", 4 * width, inp, 1)
                bn(p + ".downsample.1", 4 * width)
            inp = 4 * width
    module("avgpool")
    module("fc")
    tensors.append(("fc.weight", FloatStorage, [1000, 2048]))
    tensors.append(("fc.bias", FloatStorage, [1000]))
    return tensors, meta


s0 = Storage(FloatStorage, "0", 6)
s1 = Storage(HalfStorage, "1", 4)
sd = collections.OrderedDict()
sd["w"] = Tensor(s0, 0, (2, 3), (3, 1))
sd["p"] = Parameter(Tensor(s1, 1, (2,), (1,)))
sd["t"] = Tensor(s0, 0, (3, 2), (1, 3))
sd["meta"] = {"epoch": 3, "lr": 0.1, "name": "x", "tags": ["a", "b"], "big": 2**70}

out = os.path.dirname(os.path.abspath(__file__))
for proto in (1, 2, 4, 5):
    with open(os.path.join(out, f"pickle-p{proto}.pkl"), "wb") as f:
        Pickler(f, protocol=proto).dump(sd)
with open(os.path.join(out, "pickle-p0-meta.pkl"), "wb") as f:
    Pickler(f, protocol=0).dump(collections.OrderedDict(meta=sd["meta"], neg=-5, f=-1.5e-3, b=True))

tensors, meta = resnet152()
sd = collections.OrderedDict()
for i, (name, kind, shape) in enumerate(tensors):
    numel = 1
    for d in shape:
        numel *= d
    sd[name] = Tensor(Storage(kind, str(i), numel), 0, shape, contiguous(shape))
sd._metadata = meta
with open(os.path.join(out, "pickle-resnet152.pkl"), "wb") as f:
    Pickler(f, protocol=2).dump(sd)  # torch.save's default protocol
