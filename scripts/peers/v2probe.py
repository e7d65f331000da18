#!/usr/bin/env python3
"""v2probe: one inference request to a v2 (Open Inference Protocol) server over
gRPC, through Triton's Python client, and what came back, field by field.

It sends one batch of zero images for the model's first input and asks for
each output by name, then prints every output's name, datatype, shape,
parameters and the length of its raw_output_contents entry: a diagnostic for
a server whose answers a client refuses.

usage: python3 scripts/peers/v2probe.py HOST:PORT [--model resnet18] [--batch 1]
"""

import argparse
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch", type=int, default=1)
    args = p.parse_args(argv)

    c = grpcclient.InferenceServerClient(args.url)
    meta = c.get_model_metadata(args.model)
    inp = meta.inputs[0]
    shape = [args.batch] + [int(d) for d in inp.shape[1:]]
    dtype = {"FP32": np.float32, "FP16": np.float16, "UINT8": np.uint8}[inp.datatype]
    x = grpcclient.InferInput(inp.name, shape, inp.datatype)
    x.set_data_from_numpy(np.zeros(shape, dtype=dtype))
    outs = [grpcclient.InferRequestedOutput(o.name) for o in meta.outputs]
    r = c.infer(args.model, [x], outputs=outs).get_response()
    print(f"v2probe: {args.url} model {r.model_name} version {r.model_version!r}: "
          f"{len(r.outputs)} outputs, {len(r.raw_output_contents)} raw_output_contents")
    for i, o in enumerate(r.outputs):
        raw = len(r.raw_output_contents[i]) if i < len(r.raw_output_contents) else None
        print(f"v2probe: output {o.name} {o.datatype} {list(o.shape)} parameters {dict(o.parameters)} raw bytes {raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
