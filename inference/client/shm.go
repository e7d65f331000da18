package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// Region names where a tensor lies in a registered system shared-memory
// region (Triton's shared_memory_region, shared_memory_offset and
// shared_memory_byte_size parameters).
type Region struct {
	Name     string
	Offset   int64 // bytes into the region
	ByteSize int64 // bytes of the tensor (an output's: the room for it)
}

// SharedMemoryRegion is one registered system shared-memory region.
type SharedMemoryRegion struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

// SharedMemory is Triton's system shared-memory extension, which both
// clients offer: the client process creates a POSIX shared-memory object
// (shm_open, key "/name"), registers byteSize bytes of it at offset under a
// region name, and sends tensors as Regions (Tensor.Region,
// InferRequest.OutputRegions) instead of bytes.
type SharedMemory interface {
	RegisterSystemSharedMemory(ctx context.Context, name, key string, offset, byteSize uint64) error
	// UnregisterSystemSharedMemory unregisters name, or every region when
	// name is "".
	UnregisterSystemSharedMemory(ctx context.Context, name string) error
	// SystemSharedMemoryStatus lists name, or every region when name is "",
	// by name.
	SystemSharedMemoryStatus(ctx context.Context, name string) ([]SharedMemoryRegion, error)
}

var (
	_ SharedMemory = (*HTTPClient)(nil)
	_ SharedMemory = (*GRPCClient)(nil)
)

// regionPath is the URL of action on region name of the shared-memory
// extension at base ("/v2/systemsharedmemory", "/v2/cudasharedmemory"), or
// on every region of it when name is "".
func regionPath(base, name, action string) string {
	if name == "" {
		return base + "/" + action
	}
	return base + "/region/" + url.PathEscape(name) + "/" + action
}

func shmPath(name, action string) string { return regionPath("/v2/systemsharedmemory", name, action) }

func (c *HTTPClient) RegisterSystemSharedMemory(ctx context.Context, name, key string, offset, byteSize uint64) error {
	if name == "" {
		return fmt.Errorf("client: registering a shared-memory region needs a name")
	}
	body := fmt.Appendf(nil, `{"key":%s,"offset":%d,"byte_size":%d}`, strconv.Quote(key), offset, byteSize)
	return c.post(ctx, shmPath(name, "register"), body)
}

func (c *HTTPClient) UnregisterSystemSharedMemory(ctx context.Context, name string) error {
	return c.post(ctx, shmPath(name, "unregister"), nil)
}

func (c *HTTPClient) SystemSharedMemoryStatus(ctx context.Context, name string) ([]SharedMemoryRegion, error) {
	var out []SharedMemoryRegion
	return out, c.getJSON(ctx, shmPath(name, "status"), &out)
}

// post sends a small JSON body (or none) and expects 200.
func (c *HTTPClient) post(ctx context.Context, path string, body []byte) error {
	h := http.Header{"Content-Type": {"application/json"}}
	resp, err := c.do(ctx, http.MethodPost, path, h, bytesReader(body))
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return c.errorOf(resp)
	}
	return nil
}

func (c *GRPCClient) RegisterSystemSharedMemory(ctx context.Context, name, key string, offset, byteSize uint64) error {
	_, err := c.API().SystemSharedMemoryRegister(ctx, &v2pb.SystemSharedMemoryRegisterRequest{Name: name, Key: key, Offset: offset, ByteSize: byteSize})
	if err != nil {
		return grpcErr(err)
	}
	return nil
}

func (c *GRPCClient) UnregisterSystemSharedMemory(ctx context.Context, name string) error {
	if _, err := c.API().SystemSharedMemoryUnregister(ctx, &v2pb.SystemSharedMemoryUnregisterRequest{Name: name}); err != nil {
		return grpcErr(err)
	}
	return nil
}

func (c *GRPCClient) SystemSharedMemoryStatus(ctx context.Context, name string) ([]SharedMemoryRegion, error) {
	r, err := c.API().SystemSharedMemoryStatus(ctx, &v2pb.SystemSharedMemoryStatusRequest{Name: name})
	if err != nil {
		return nil, grpcErr(err)
	}
	var out []SharedMemoryRegion
	for _, st := range r.GetRegions() {
		out = append(out, SharedMemoryRegion{Name: st.GetName(), Key: st.GetKey(), Offset: st.GetOffset(), ByteSize: st.GetByteSize()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// regionParams are a Region's parameters in HTTP JSON.
func (r *Region) jsonParams() map[string]any {
	p := map[string]any{"shared_memory_region": r.Name, "shared_memory_byte_size": r.ByteSize}
	if r.Offset != 0 {
		p["shared_memory_offset"] = r.Offset
	}
	return p
}

// grpcParams are a Region's parameters in a gRPC message.
func (r *Region) grpcParams() map[string]*v2pb.InferParameter {
	p := map[string]*v2pb.InferParameter{
		"shared_memory_region":    {ParameterChoice: &v2pb.InferParameter_StringParam{StringParam: r.Name}},
		"shared_memory_byte_size": {ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: r.ByteSize}},
	}
	if r.Offset != 0 {
		p["shared_memory_offset"] = &v2pb.InferParameter{ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: r.Offset}}
	}
	return p
}

// bytesReader is b as a request body, or no body when b is empty.
func bytesReader(b []byte) io.Reader {
	if len(b) == 0 {
		return nil
	}
	return bytes.NewReader(b)
}

// outputNames are the outputs req asks for: Outputs, then the outputs of
// OutputRegions that Outputs does not name, sorted.
func outputNames(req *InferRequest) []string {
	names := append([]string(nil), req.Outputs...)
	var extra []string
	for name := range req.OutputRegions {
		if !slices.Contains(names, name) {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	return append(names, extra...)
}

// regionOf reads an answered output's shared-memory parameters: nil when
// its data came in the answer.
func regionOf(name string, p map[string]any) (*Region, error) {
	v, ok := p["shared_memory_region"]
	if !ok {
		return nil, nil
	}
	r := &Region{}
	var okName bool
	if r.Name, okName = v.(string); !okName {
		return nil, fmt.Errorf("client: output %q: shared_memory_region %v is not a string", name, v)
	}
	for key, dst := range map[string]*int64{"shared_memory_offset": &r.Offset, "shared_memory_byte_size": &r.ByteSize} {
		x, ok := p[key]
		if !ok {
			continue
		}
		var err error
		switch n := x.(type) {
		case json.Number:
			*dst, err = n.Int64()
		case int64:
			*dst = n
		default:
			err = fmt.Errorf("%T", x)
		}
		if err != nil {
			return nil, fmt.Errorf("client: output %q: %s %v is not an integer", name, key, x)
		}
	}
	return r, nil
}

// answeredRegion is the region an answered output was written into: the
// region the request named for it, or, for an output the request did not put
// in shared memory, one the answer's parameters name; nil when its data came
// in the answer.
func answeredRegion(name string, asked map[string]Region, p map[string]any) (*Region, error) {
	if r, ok := asked[name]; ok {
		return &r, nil
	}
	return regionOf(name, p)
}

// grpcParams turns a gRPC output's parameters into regionOf's form.
func grpcParams(p map[string]*v2pb.InferParameter) map[string]any {
	m := make(map[string]any, len(p))
	for k, v := range p {
		switch c := v.GetParameterChoice().(type) {
		case *v2pb.InferParameter_StringParam:
			m[k] = c.StringParam
		case *v2pb.InferParameter_Int64Param:
			m[k] = c.Int64Param
		case *v2pb.InferParameter_Uint64Param:
			m[k] = int64(c.Uint64Param)
		}
	}
	return m
}
