// Package v2pb is the Go code protoc generates from grpc_service.proto and
// model_config.proto: the messages and the inference.GRPCInferenceService
// client and server of the Open Inference Protocol (KServe v2) over gRPC,
// with Triton's extension methods on the same service (model configuration,
// statistics, system and CUDA shared memory). Do not edit the generated
// files; change the .proto files and run go generate.
package v2pb

//go:generate ./gen.sh
