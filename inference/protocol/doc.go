// Package protocol is the network front door of an inference.Server: the
// Open Inference Protocol (KServe v2) over HTTP/REST and gRPC, as Triton,
// KServe, MLServer and TorchServe speak it, with Triton's binary tensor data,
// model configuration, statistics and system shared-memory extensions (see
// shm.go) and Prometheus metrics under Triton's names.
//
// A request goes through five steps:
//
//  1. Routing: the URL (HTTP) or the method (gRPC) names the model and
//     version; an unknown one is 404 / NotFound. A draining server, or one
//     with no worker in service, answers 503 / Unavailable.
//  2. Decoding: the JSON header (HTTP) or the message (gRPC) is checked
//     against the model's one input before any tensor data is read: name,
//     datatype (FP32, FP16 or UINT8), shape [n, C, H, W] with 1 <= n <=
//     MaxBatch. Every failure is 400 / InvalidArgument naming what was
//     expected and what came. Bodies and messages are bounded.
//  3. Input buffer: an FP32 input in a registered shared-memory region is
//     used where it lies (a view of the mapping, no copy). Otherwise the
//     tensor is written into a buffer from the server's AllocInput (pinned
//     memory on CUDA), taken from a pool bounded in bytes
//     (ModelConfig.InflightBytes): binary FP32 data is read from the socket
//     straight into it; FP16 is widened exactly, UINT8 normalised as
//     torchvision does, JSON numbers parsed without reflection. When the
//     server normalises uint8 on the device (Server.Uint8OnDevice, with the
//     model's normalisation), binary UINT8 data stays bytes: read into the
//     pooled buffer's memory (HTTP and gRPC raw) or the region in place
//     (shared memory).
//  4. Inference: the buffer is submitted with the request's context, so a
//     client that disconnects or whose deadline passes cancels it; the
//     buffer returns to the pool (or the region is let go) only once the
//     server has answered.
//  5. Answer: the logits as JSON numbers, as binary data after the JSON
//     header, or as gRPC raw (or typed) contents, or written by the server
//     straight into the output's shared-memory region; errors map to HTTP
//     statuses and gRPC codes (asError).
//
// Service ties a Model to the transports: HTTPHandler, NewGRPCServer (our
// own HTTP/2 server, package h2grpc, whose ModelInfer requests are decoded
// as they arrive with grpcSink, or grpc-go's, with inferCodec), RegisterGRPC
// (with grpc.health.v1 and reflection), Collector, Drain. cmd/inferbench
// serve runs them; package client calls them.
package protocol
