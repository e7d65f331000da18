#!/bin/sh
# Regenerates the Go code from grpc_service.proto and model_config.proto with
# pinned plugins (go generate runs it). protoc itself comes from the system
# (Debian: protobuf-compiler).
set -eu
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
PATH=$bin:$PATH protoc --go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative grpc_service.proto model_config.proto
