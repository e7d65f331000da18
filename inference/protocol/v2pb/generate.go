// Package v2pb is the Go code protoc generates from grpc_service.proto: the
// messages and the inference.GRPCInferenceService client and server of the
// Open Inference Protocol (KServe v2) over gRPC. Do not edit the generated
// files; change the .proto and run go generate.
package v2pb

//go:generate ./gen.sh
