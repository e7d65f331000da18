// Package client calls servers that speak the Open Inference Protocol
// (KServe v2): ours (cmd/inferbench serve) or any other, such as Triton,
// KServe's model servers, MLServer or TorchServe in v2 mode.
//
// A request goes through three steps:
//
//  1. the caller builds an InferRequest from Tensors (FP32 data is sent
//     from the caller's own memory, not copied);
//  2. HTTP (NewHTTP) sends it as JSON plus binary tensor data (Triton's binary
//     tensor data extension) or, with HTTPOptions.JSON, as JSON numbers; gRPC
//     (NewGRPC) sends raw_input_contents;
//  3. the answer is an InferResponse whose outputs hold little-endian bytes,
//     or an *Error carrying the HTTP status or gRPC code and the server's
//     message.
//
// Tensors may instead lie in system shared memory (Triton's extension, the
// SharedMemory interface both clients implement): register a region of a
// POSIX shared-memory object, then send inputs with a Region and ask for
// outputs in InferRequest.OutputRegions; only the request's header crosses
// the socket. CreateSharedMemory makes and maps such an object from Go. CUDA
// shared memory (Triton's other extension, CudaSharedMemory) works the same
// with GPU memory registered by its CUDA IPC handle; AllocCUDA makes such
// memory in a -tags cuda build.
//
// Both clients also read a model's statistics (Triton's extension,
// Statistics), cumulative figures that the server measured itself. A
// Balancer spreads calls over several servers by least outstanding
// requests.
//
// Both clients reuse connections and are safe for concurrent use; a context
// bounds every call (its deadline becomes the gRPC deadline).
package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"google.golang.org/grpc/codes"
)

// Client is what both transports offer.
type Client interface {
	// Live and Ready are the server's health.
	Live(ctx context.Context) (bool, error)
	Ready(ctx context.Context) (bool, error)
	// ModelReady is one model's readiness ("" version: the server's choice).
	ModelReady(ctx context.Context, model, version string) (bool, error)
	ServerMetadata(ctx context.Context) (*ServerMetadata, error)
	ModelMetadata(ctx context.Context, model, version string) (*ModelMetadata, error)
	// Infer runs one request.
	Infer(ctx context.Context, req *InferRequest) (*InferResponse, error)
	// Close releases the connections.
	Close() error
}

// Tensor is a named tensor whose elements are little-endian bytes of its
// datatype, row-major.
type Tensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Data     []byte
	// Region, if set, says the tensor lies in a registered system
	// shared-memory region instead of in Data: an input is sent as the
	// region's parameters (Data is ignored), and an output the server wrote
	// there comes back with Region set and no Data.
	Region *Region
}

// FP32 returns an FP32 tensor over v's memory (no copy on little-endian
// hosts): v must not change until the request that carries it returns.
func FP32(name string, shape []int64, v []float32) Tensor {
	return Tensor{Name: name, Datatype: "FP32", Shape: shape, Data: float32Bytes(v)}
}

// Float32s decodes an FP32 tensor.
func (t Tensor) Float32s() ([]float32, error) {
	if t.Datatype != "FP32" {
		return nil, fmt.Errorf("client: tensor %q is %s, not FP32", t.Name, t.Datatype)
	}
	if len(t.Data)%4 != 0 {
		return nil, fmt.Errorf("client: tensor %q has %d bytes, not a whole number of FP32 values", t.Name, len(t.Data))
	}
	v := make([]float32, len(t.Data)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return v, nil
}

// elements is the number of elements of shape, or -1 if a dimension is
// negative.
func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}

// InferRequest is one inference request.
type InferRequest struct {
	Model   string // required
	Version string // "" lets the server choose
	ID      string // echoed in the response
	Inputs  []Tensor
	// Outputs names the outputs wanted; empty means all.
	Outputs []string
	// OutputRegions asks for outputs to be written into system shared-memory
	// regions, by output name (each is asked for, whether Outputs names it or
	// not).
	OutputRegions map[string]Region
	// TimeoutMicros, if positive, is Triton's "timeout" request parameter: the
	// server drops the request if it has not run within this many microseconds.
	TimeoutMicros int64
}

// InferResponse is a server's answer.
type InferResponse struct {
	ModelName, ModelVersion, ID string
	Outputs                     []Tensor
}

// Output returns the output called name.
func (r *InferResponse) Output(name string) (Tensor, error) {
	for _, t := range r.Outputs {
		if t.Name == name {
			return t, nil
		}
	}
	return Tensor{}, fmt.Errorf("client: response has no output %q", name)
}

// ServerMetadata is the server's self-description.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// TensorMetadata describes one model input or output; -1 is a variable
// dimension.
type TensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelMetadata describes a model.
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions"`
	Platform string           `json:"platform"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs"`
}

// Error is a failure the server reported.
type Error struct {
	HTTPStatus int        // HTTP transport: the status
	Code       codes.Code // gRPC transport: the code
	Msg        string
}

func (e *Error) Error() string {
	if e.HTTPStatus != 0 {
		return fmt.Sprintf("server answered %d: %s", e.HTTPStatus, e.Msg)
	}
	return fmt.Sprintf("server answered %s: %s", e.Code, e.Msg)
}

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// float32Bytes is v as little-endian bytes: v's memory where the host is
// little-endian, a copy elsewhere.
func float32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	}
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}
