#!/usr/bin/env python3
"""Drive an inferbench server with Triton's own Python client (tritonclient).

The interoperability check of the front door: everything goes through
PyPI's tritonclient, HTTP and gRPC, and its system shared-memory helpers
(tritonclient.utils.shared_memory), none of it written here.

  1. metadata, model configuration and statistics over both transports;
  2. inference over HTTP (binary tensor data, then JSON numbers) and gRPC;
  3. system shared memory: create an input and an output region with the
     client's helpers (keys with serve's -shm-key-prefix, "inferbench-"),
     register them over each transport, infer with the input and the output
     in shared memory, check the status, unregister, destroy the regions;
     with --shm-header, every shared-memory call sends that header (over
     gRPC in Triton's spelling, triton-grpc-protocol-<name>) and a status
     call without it must be refused;
  4. streaming inference (ModelStreamInfer) through the gRPC client's
     stream API: several requests on one stream, each answer found by its
     request id, and a failing request answered with an error on the same
     stream.

Every logits tensor must equal --want bit for bit (the same server's
in-process answer, computed by the Go test that runs this script). The
input and the expected logits are raw little-endian float32 files.
Prints one "ok" line per check; exits 1 at the first mismatch.

  python3 scripts/peers/tritonclient_check.py --http 127.0.0.1:8000 --grpc 127.0.0.1:8001 \\
      --input in.f32 --shape 2,3,32,32 --want logits.f32 --classes 5 [--shm-header name=value]
"""

import argparse
import os
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm


def fail(msg):
    print("FAIL " + msg, file=sys.stderr)
    sys.exit(1)


def same_bits(what, got, want):
    got = np.ascontiguousarray(got, dtype=np.float32)
    if got.shape != want.shape:
        fail(f"{what}: logits shape {got.shape}, want {want.shape}")
    if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        diff = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
        fail(f"{what}: {diff} of {want.size} logits differ from in-process, max |diff| {np.max(np.abs(got - want))}")
    print(f"ok {what}: {want.size} logits equal in-process bit for bit")


def check_metadata(name, client, model, want_shape, classes, extensions):
    md = client.get_server_metadata()
    exts = md["extensions"] if isinstance(md, dict) else list(md.extensions)
    for e in extensions:
        if e not in exts:
            fail(f"{name}: server metadata extensions {exts} lack {e}")
    cfg = client.get_model_config(model)
    if not isinstance(cfg, dict):
        cfg = cfg.config
        max_batch, inp, out = cfg.max_batch_size, cfg.input[0], cfg.output[0]
        in_dims, out_dims, dtype = list(inp.dims), list(out.dims), grpcclient.model_config_pb2.DataType.Name(inp.data_type)
    else:
        max_batch, inp, out = cfg["max_batch_size"], cfg["input"][0], cfg["output"][0]
        in_dims, out_dims, dtype = inp["dims"], out["dims"], inp["data_type"]
    if max_batch < want_shape[0] or in_dims != list(want_shape[1:]) or out_dims != [classes] or dtype != "TYPE_FP32":
        fail(f"{name}: model config max_batch_size {max_batch}, input dims {in_dims} {dtype}, output dims {out_dims}")
    print(f"ok {name} metadata and config: extensions {sorted(exts)}, max_batch_size {max_batch}, input {dtype} {in_dims}")


def inference_count(name, client, model):
    st = client.get_inference_statistics(model)
    if isinstance(st, dict):
        return int(st["model_stats"][0]["inference_count"])
    return int(st.model_stats[0].inference_count)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--http", required=True, help="host:port of the HTTP/REST API")
    p.add_argument("--grpc", required=True, help="host:port of the gRPC API")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--input", required=True, help="raw little-endian float32 images, NCHW")
    p.add_argument("--shape", required=True, help="n,c,h,w of the input")
    p.add_argument("--want", required=True, help="raw little-endian float32 logits the server answers in-process")
    p.add_argument("--classes", type=int, required=True)
    p.add_argument("--shm-header", default="", help="name=value the server requires of shared-memory calls (serve -shm-header)")
    a = p.parse_args()

    shape = [int(x) for x in a.shape.split(",")]
    images = np.fromfile(a.input, dtype="<f4").reshape(shape)
    want = np.fromfile(a.want, dtype="<f4").reshape(shape[0], a.classes)
    hc = httpclient.InferenceServerClient(a.http)
    gc = grpcclient.InferenceServerClient(a.grpc)
    clients = {"http": (hc, httpclient), "grpc": (gc, grpcclient)}
    headers = {"http": None, "grpc": None}
    if a.shm_header:
        key, value = a.shm_header.split("=", 1)
        headers = {"http": {key: value}, "grpc": {"triton-grpc-protocol-" + key: value}}

    # 1. Health, metadata, configuration.
    for name, (c, _) in clients.items():
        if not (c.is_server_live() and c.is_server_ready() and c.is_model_ready(a.model)):
            fail(f"{name}: server or model not ready")
        check_metadata(name, c, a.model, shape, a.classes, ["binary_tensor_data", "model_configuration", "statistics", "system_shared_memory"])
    before = inference_count("http", hc, a.model)

    # 2. Inference over both transports.
    for name, (c, mod), binary in [("http binary", clients["http"], True), ("http json", clients["http"], False), ("grpc", clients["grpc"], None)]:
        inp = mod.InferInput("input", shape, "FP32")
        out = mod.InferRequestedOutput("logits") if binary is None else mod.InferRequestedOutput("logits", binary_data=binary)
        if binary is None:
            inp.set_data_from_numpy(images)
        else:
            inp.set_data_from_numpy(images, binary_data=binary)
        r = c.infer(a.model, [inp], outputs=[out], request_id=name.replace(" ", "-"))
        same_bits(name, r.as_numpy("logits"), want)

    # 3. System shared memory through the client's own helpers.
    tag = f"inferbench-{os.getpid()}"
    in_bytes, out_bytes = images.nbytes, want.nbytes
    in_region = shm.create_shared_memory_region(f"{tag}_in", f"/{tag}_in", in_bytes)
    out_region = shm.create_shared_memory_region(f"{tag}_out", f"/{tag}_out", out_bytes)
    try:
        shm.set_shared_memory_region(in_region, [images])
        for name, (c, mod) in clients.items():
            h = headers[name]
            if h:
                try:
                    c.get_system_shared_memory_status()
                    fail(f"{name} shared memory: a status call without the required header was answered")
                except Exception as e:  # tritonclient's InferenceServerException
                    if "restricted" not in str(e):
                        fail(f"{name} shared memory: a call without the required header failed otherwise: {e}")
                    print(f"ok {name} shared memory: a call without the required header is refused: {e}")
            c.unregister_system_shared_memory(headers=h)
            c.register_system_shared_memory("in", f"/{tag}_in", in_bytes, headers=h)
            c.register_system_shared_memory("out", f"/{tag}_out", out_bytes, headers=h)
            status = c.get_system_shared_memory_status(headers=h)
            names = sorted(r["name"] for r in status) if isinstance(status, list) else sorted(status.regions.keys())
            if names != ["in", "out"]:
                fail(f"{name} shared memory: status lists {names}, want ['in', 'out']")
            shm.set_shared_memory_region(out_region, [np.zeros_like(want)])
            inp = mod.InferInput("input", shape, "FP32")
            inp.set_shared_memory("in", in_bytes)
            out = mod.InferRequestedOutput("logits") if mod is grpcclient else mod.InferRequestedOutput("logits", binary_data=True)
            out.set_shared_memory("out", out_bytes)
            r = c.infer(a.model, [inp], outputs=[out], headers=h)
            o = r.get_output("logits")
            if o is None:
                fail(f"{name} shared memory: no output named logits in the response")
            same_bits(f"{name} shared memory", shm.get_contents_as_numpy(out_region, np.float32, want.shape), want)
            c.unregister_system_shared_memory("in", headers=h)
            c.unregister_system_shared_memory("out", headers=h)
            status = c.get_system_shared_memory_status(headers=h)
            left = status if isinstance(status, list) else list(status.regions.keys())
            if left:
                fail(f"{name} shared memory: regions left after unregister: {left}")
            print(f"ok {name} shared memory: registered, used for input and output, unregistered")
    finally:
        shm.destroy_shared_memory_region(in_region)
        shm.destroy_shared_memory_region(out_region)

    # 4. Streaming: answers come through the callback, in any order.
    answers = queue.Queue()
    gc.start_stream(callback=lambda result, error: answers.put((result, error)))
    ids = [f"stream-{i}" for i in range(3)]
    for rid in ids:
        inp = grpcclient.InferInput("input", shape, "FP32")
        inp.set_data_from_numpy(images)
        gc.async_stream_infer(a.model, [inp], outputs=[grpcclient.InferRequestedOutput("logits")], request_id=rid)
    for _ in range(len(ids)):
        result, error = answers.get(timeout=60)
        if error is not None:
            fail(f"grpc stream: {error}")
        rid = result.get_response().id
        if rid not in ids:
            fail(f"grpc stream: an answer for request id {rid!r}, sent {ids}")
        ids.remove(rid)
        same_bits(f"grpc stream {rid}", result.as_numpy("logits"), want)
    inp = grpcclient.InferInput("input", shape, "FP32")
    inp.set_data_from_numpy(images)
    if ids:
        fail(f"grpc stream: no answer for {ids}")
    gc.async_stream_infer("resnet50", [inp], request_id="stream-unknown")
    result, error = answers.get(timeout=60)
    if error is None or "unknown model" not in str(error):
        fail(f"grpc stream: a request for an unknown model answered {result} / {error}")
    gc.stop_stream()
    print(f"ok grpc stream: 3 answers found by id, and an error answer: {error}")

    # Statistics count what was served: 3 plain, 2 shared-memory and 3
    # streamed requests.
    after = inference_count("grpc", gc, a.model)
    if after - before != 8 * shape[0]:
        fail(f"statistics: inference_count went from {before} to {after}, want +{8 * shape[0]}")
    print(f"ok statistics: inference_count {before} -> {after}")
    hc.close()
    gc.close()


if __name__ == "__main__":
    main()
