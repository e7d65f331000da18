// Package h2grpc is gRPC over HTTP/2 (RFC 9113, with gRPC's HTTP/2
// mapping), cleartext or over TLS, written for batch-sized messages: a
// server that runs grpc.ServiceDesc handlers and a client for unary calls,
// each moving a message's bytes between the socket and their final memory
// without a copy in between.
//
// grpc-go, which the rest of the module uses, copies a 192 MB request several
// times: the client into its write buffer, in 16 KiB frames; the server out
// of its read buffer into a buffer per frame, then (in this module's codec)
// into the input tensor, which kept two processes at about half of what
// loopback carries. Here:
//
//  1. The client writes a request from the caller's memory with writev (one
//     write a slice over TLS), in frames as large as the server accepts
//     (this server takes 8 MiB).
//  2. The server's connection reader reads each DATA frame's payload from the
//     socket into the memory a Sink names: for the inference service's
//     requests, the input tensor's buffer (package protocol's grpcSink);
//     otherwise a buffer the message is decoded from.
//  3. Handlers run one call at a time on goroutines kept between calls (as
//     grpc-go's NumStreamWorkers), as registered with RegisterService
//     (server reflection and grpc.health.v1 included);
//     answers are written with the same frames, in one write each where the
//     client's flow-control windows allow.
//
// What is left out: compression (a compressed message is refused with
// Unimplemented), interceptors, and sending metadata; the client makes unary
// calls only. Flow control, SETTINGS, PING, GOAWAY (graceful stop),
// RST_STREAM, CONTINUATION, padding and the checks of a request's header
// list follow the RFC; h2spec's cases that grpc-go's server passes pass
// here too (scripts/h2spec.sh, docs/H2SPEC.md). Every size a peer chooses
// is bounded: messages (a claimed length is not allocated), header lists
// and blocks, frames, windows, and concurrent calls, a reset one counting
// until its handler returns; PINGs are held to grpc-go's keepalive
// enforcement, and do not keep a connection from being idle.
package h2grpc
