package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// CudaSharedMemoryRegion is one registered CUDA shared-memory region.
type CudaSharedMemoryRegion struct {
	Name     string `json:"name"`
	DeviceID uint64 `json:"device_id"`
	ByteSize uint64 `json:"byte_size"`
}

// CudaSharedMemory is Triton's CUDA shared-memory extension, which both
// clients offer: the client process allocates GPU memory, registers it under
// a region name by its CUDA IPC handle (cudaIpcGetMemHandle's 64 bytes; see
// AllocCUDA), and sends tensors as Regions (Tensor.Region,
// InferRequest.OutputRegions), exactly as with system shared memory: the two
// kinds share one namespace of region names. The server copies the tensors
// on the GPU; nothing but the request's header crosses the socket.
type CudaSharedMemory interface {
	// RegisterCudaSharedMemory registers byteSize bytes of the allocation
	// whose IPC handle is rawHandle, on the GPU with ordinal deviceID.
	RegisterCudaSharedMemory(ctx context.Context, name string, rawHandle []byte, deviceID int64, byteSize uint64) error
	// UnregisterCudaSharedMemory unregisters name, or every CUDA region
	// when name is "".
	UnregisterCudaSharedMemory(ctx context.Context, name string) error
	// CudaSharedMemoryStatus lists name, or every CUDA region when name is
	// "", by name.
	CudaSharedMemoryStatus(ctx context.Context, name string) ([]CudaSharedMemoryRegion, error)
}

var (
	_ CudaSharedMemory = (*HTTPClient)(nil)
	_ CudaSharedMemory = (*GRPCClient)(nil)
)

func cudaSHMPath(name, action string) string { return regionPath("/v2/cudasharedmemory", name, action) }

func (c *HTTPClient) RegisterCudaSharedMemory(ctx context.Context, name string, rawHandle []byte, deviceID int64, byteSize uint64) error {
	if name == "" {
		return fmt.Errorf("client: registering a CUDA shared-memory region needs a name")
	}
	body := fmt.Appendf(nil, `{"raw_handle":{"b64":%q},"device_id":%d,"byte_size":%d}`, base64.StdEncoding.EncodeToString(rawHandle), deviceID, byteSize)
	return c.post(ctx, cudaSHMPath(name, "register"), body)
}

func (c *HTTPClient) UnregisterCudaSharedMemory(ctx context.Context, name string) error {
	return c.post(ctx, cudaSHMPath(name, "unregister"), nil)
}

func (c *HTTPClient) CudaSharedMemoryStatus(ctx context.Context, name string) ([]CudaSharedMemoryRegion, error) {
	var out []CudaSharedMemoryRegion
	return out, c.getJSON(ctx, cudaSHMPath(name, "status"), &out)
}

func (c *GRPCClient) RegisterCudaSharedMemory(ctx context.Context, name string, rawHandle []byte, deviceID int64, byteSize uint64) error {
	_, err := c.API().CudaSharedMemoryRegister(ctx, &v2pb.CudaSharedMemoryRegisterRequest{Name: name, RawHandle: rawHandle, DeviceId: deviceID, ByteSize: byteSize})
	if err != nil {
		return grpcErr(err)
	}
	return nil
}

func (c *GRPCClient) UnregisterCudaSharedMemory(ctx context.Context, name string) error {
	if _, err := c.API().CudaSharedMemoryUnregister(ctx, &v2pb.CudaSharedMemoryUnregisterRequest{Name: name}); err != nil {
		return grpcErr(err)
	}
	return nil
}

func (c *GRPCClient) CudaSharedMemoryStatus(ctx context.Context, name string) ([]CudaSharedMemoryRegion, error) {
	r, err := c.API().CudaSharedMemoryStatus(ctx, &v2pb.CudaSharedMemoryStatusRequest{Name: name})
	if err != nil {
		return nil, grpcErr(err)
	}
	var out []CudaSharedMemoryRegion
	for _, st := range r.GetRegions() {
		out = append(out, CudaSharedMemoryRegion{Name: st.GetName(), DeviceID: st.GetDeviceId(), ByteSize: st.GetByteSize()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
