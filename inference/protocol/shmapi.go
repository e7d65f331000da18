package protocol

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/v2pb"
)

// maxRegisterBody bounds the JSON body of a shared-memory registration.
const maxRegisterBody = 64 << 10

// serveSystemSHM routes the system shared-memory API (parts follow
// "systemsharedmemory"):
//
//	GET  /v2/systemsharedmemory[/region/{name}]/status
//	POST /v2/systemsharedmemory/region/{name}/register   {"key", "offset", "byte_size"}
//	POST /v2/systemsharedmemory[/region/{name}]/unregister
func (s *Service) serveSystemSHM(w http.ResponseWriter, r *http.Request, parts []string) {
	s.serveSHM(w, r, parts, systemRegion, func(ns, name string, body io.Reader) error {
		req, err := decodeRegister(body)
		if err != nil {
			return err
		}
		return s.shm.register(ns, name, req.key, req.offset, req.size)
	})
}

// serveCudaSHM routes the CUDA shared-memory API (parts follow
// "cudasharedmemory"):
//
//	GET  /v2/cudasharedmemory[/region/{name}]/status
//	POST /v2/cudasharedmemory/region/{name}/register   {"raw_handle": {"b64"}, "device_id", "byte_size"}
//	POST /v2/cudasharedmemory[/region/{name}]/unregister
func (s *Service) serveCudaSHM(w http.ResponseWriter, r *http.Request, parts []string) {
	s.serveSHM(w, r, parts, cudaRegion, func(ns, name string, body io.Reader) error {
		req, err := decodeCudaRegister(body)
		if err != nil {
			return err
		}
		return s.shm.registerCUDA(ns, name, req.handle, req.device, req.size)
	})
}

// serveSHM answers one shared-memory API call on regions of kind, once the
// call is admitted (shmaccess.go); register decodes a registration's body
// and registers the region in the caller's namespace.
func (s *Service) serveSHM(w http.ResponseWriter, r *http.Request, parts []string, kind regionKind, register func(ns, name string, body io.Reader) error) {
	off := s.shm.systemOff()
	if kind == cudaRegion {
		off = s.shm.cudaOff()
	}
	ns, err := s.shm.callerHTTP(r.Header, off)
	if err != nil {
		s.httpError(w, err)
		return
	}
	name, action, ok := shmRoute(parts)
	switch {
	case !ok:
		s.httpError(w, notFound("no such endpoint %q", r.URL.Path))
	case action == "status":
		list, err := s.shm.status(ns, name, kind)
		if err != nil {
			s.httpError(w, err)
			return
		}
		s.get(w, r, func() any { return statusJSON(list, kind) })
	case action == "register" && name != "":
		if !s.post(w, r) {
			return
		}
		s.answerEmpty(w, register(ns, name, http.MaxBytesReader(w, r.Body, maxRegisterBody)))
	case action == "unregister":
		if !s.post(w, r) {
			return
		}
		s.answerEmpty(w, s.shm.unregister(ns, name, kind))
	default:
		s.httpError(w, notFound("no such endpoint %q", r.URL.Path))
	}
}

// statusJSON is a status answer: $system_shared_memory_status_response
// ({"name", "key", "offset", "byte_size"} each) or
// $cuda_shared_memory_status_response ({"name", "device_id", "byte_size"}).
func statusJSON(list []regionStatus, kind regionKind) any {
	type system struct {
		Name     string `json:"name"`
		Key      string `json:"key"`
		Offset   uint64 `json:"offset"`
		ByteSize uint64 `json:"byte_size"`
	}
	type cuda struct {
		Name     string `json:"name"`
		DeviceID int64  `json:"device_id"`
		ByteSize uint64 `json:"byte_size"`
	}
	if kind == cudaRegion {
		out := []cuda{}
		for _, st := range list {
			out = append(out, cuda{Name: st.Name, DeviceID: st.DeviceID, ByteSize: st.ByteSize})
		}
		return out
	}
	out := []system{}
	for _, st := range list {
		out = append(out, system{Name: st.Name, Key: st.Key, Offset: st.Offset, ByteSize: st.ByteSize})
	}
	return out
}

// shmRoute splits [region/{name}/]{status|register|unregister}.
func shmRoute(parts []string) (name, action string, ok bool) {
	switch {
	case len(parts) == 1:
		return "", parts[0], parts[0] == "status" || parts[0] == "unregister"
	case len(parts) == 3 && parts[0] == "region" && parts[1] != "":
		return parts[1], parts[2], parts[2] == "status" || parts[2] == "register" || parts[2] == "unregister"
	}
	return "", "", false
}

// post fails a request that is not a POST.
func (s *Service) post(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.httpError(w, &Error{Status: http.StatusMethodNotAllowed, Msg: r.Method + " not allowed here: use POST"})
		return false
	}
	return true
}

// answerEmpty answers 200 with an empty body, or err.
func (s *Service) answerEmpty(w http.ResponseWriter, err error) {
	if err != nil {
		s.httpError(w, err)
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

// registerRequest is a decoded $system_shared_memory_register_request.
type registerRequest struct {
	key          string
	offset, size uint64
}

// decodeRegister reads {"key": string, "offset": number, "byte_size":
// number}: key and byte_size are required, offset defaults to 0, both
// numbers are non-negative integers; other fields are ignored.
func decodeRegister(body io.Reader) (registerRequest, error) {
	var j struct {
		Key      *string      `json:"key"`
		Offset   *json.Number `json:"offset"`
		ByteSize *json.Number `json:"byte_size"`
	}
	dec := json.NewDecoder(body)
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		return registerRequest{}, badRequest("invalid shared-memory registration JSON (want {\"key\": string, \"offset\": number, \"byte_size\": number}): %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return registerRequest{}, badRequest("shared-memory registration: unexpected data after the JSON object")
	}
	var req registerRequest
	if j.Key == nil {
		return req, badRequest("shared-memory registration: \"key\" missing")
	}
	req.key = *j.Key
	var err error
	if j.ByteSize == nil {
		return req, badRequest("shared-memory registration: \"byte_size\" missing")
	}
	if req.size, err = uintField("byte_size", *j.ByteSize); err != nil {
		return req, err
	}
	if j.Offset != nil {
		if req.offset, err = uintField("offset", *j.Offset); err != nil {
			return req, err
		}
	}
	return req, nil
}

// cudaRegisterRequest is a decoded $cuda_shared_memory_register_request.
type cudaRegisterRequest struct {
	handle []byte
	device int64
	size   uint64
}

// maxHandleB64 bounds the base64 text of a raw handle: 64 bytes take 88
// characters; a little more leaves room for a message that says what came.
const maxHandleB64 = 4 * backend.IPCHandleSize

// decodeCudaRegister reads {"raw_handle": {"b64": string}, "device_id":
// number, "byte_size": number}: all three are required, the handle is
// base64 (standard alphabet, padded) of exactly 64 bytes, the numbers are
// non-negative integers; other fields are ignored.
func decodeCudaRegister(body io.Reader) (cudaRegisterRequest, error) {
	var j struct {
		RawHandle *struct {
			B64 *string `json:"b64"`
		} `json:"raw_handle"`
		DeviceID *json.Number `json:"device_id"`
		ByteSize *json.Number `json:"byte_size"`
	}
	const want = `{"raw_handle": {"b64": string}, "device_id": number, "byte_size": number}`
	dec := json.NewDecoder(body)
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		return cudaRegisterRequest{}, badRequest("invalid CUDA shared-memory registration JSON (want %s): %v", want, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return cudaRegisterRequest{}, badRequest("CUDA shared-memory registration: unexpected data after the JSON object")
	}
	var req cudaRegisterRequest
	switch {
	case j.RawHandle == nil || j.RawHandle.B64 == nil:
		return req, badRequest("CUDA shared-memory registration: \"raw_handle\": {\"b64\": ...} missing (want %s)", want)
	case j.DeviceID == nil:
		return req, badRequest("CUDA shared-memory registration: \"device_id\" missing")
	case j.ByteSize == nil:
		return req, badRequest("CUDA shared-memory registration: \"byte_size\" missing")
	case len(*j.RawHandle.B64) > maxHandleB64:
		return req, badRequest("CUDA shared-memory registration: raw_handle.b64 has %d characters; a %d-byte cudaIpcMemHandle_t takes %d",
			len(*j.RawHandle.B64), backend.IPCHandleSize, base64.StdEncoding.EncodedLen(backend.IPCHandleSize))
	}
	var err error
	if req.handle, err = base64.StdEncoding.DecodeString(*j.RawHandle.B64); err != nil {
		return req, badRequest("CUDA shared-memory registration: raw_handle.b64 is not base64: %v", err)
	}
	device, err := uintField("device_id", *j.DeviceID)
	if err != nil {
		return req, err
	}
	if device > math.MaxInt32 {
		return req, badRequest("CUDA shared-memory registration: \"device_id\" %d, want a GPU's ordinal", device)
	}
	req.device = int64(device)
	if req.size, err = uintField("byte_size", *j.ByteSize); err != nil {
		return req, err
	}
	return req, nil
}

func uintField(name string, n json.Number) (uint64, error) {
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, badRequest("shared-memory registration: %q %s, want a non-negative integer", name, n)
	}
	return v, nil
}

func (g grpcService) SystemSharedMemoryStatus(ctx context.Context, r *v2pb.SystemSharedMemoryStatusRequest) (*v2pb.SystemSharedMemoryStatusResponse, error) {
	ns, err := g.s.shm.callerGRPC(ctx, g.s.shm.systemOff())
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	list, err := g.s.shm.status(ns, r.GetName(), systemRegion)
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	resp := &v2pb.SystemSharedMemoryStatusResponse{Regions: map[string]*v2pb.SystemSharedMemoryStatusResponse_RegionStatus{}}
	for _, st := range list {
		resp.Regions[st.Name] = &v2pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: st.Name, Key: st.Key, Offset: st.Offset, ByteSize: st.ByteSize}
	}
	return resp, nil
}

func (g grpcService) SystemSharedMemoryRegister(ctx context.Context, r *v2pb.SystemSharedMemoryRegisterRequest) (*v2pb.SystemSharedMemoryRegisterResponse, error) {
	ns, err := g.s.shm.callerGRPC(ctx, g.s.shm.systemOff())
	if err == nil {
		err = g.s.shm.register(ns, r.GetName(), r.GetKey(), r.GetOffset(), r.GetByteSize())
	}
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.SystemSharedMemoryRegisterResponse{}, nil
}

func (g grpcService) SystemSharedMemoryUnregister(ctx context.Context, r *v2pb.SystemSharedMemoryUnregisterRequest) (*v2pb.SystemSharedMemoryUnregisterResponse, error) {
	ns, err := g.s.shm.callerGRPC(ctx, g.s.shm.systemOff())
	if err == nil {
		err = g.s.shm.unregister(ns, r.GetName(), systemRegion)
	}
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.SystemSharedMemoryUnregisterResponse{}, nil
}

func (g grpcService) CudaSharedMemoryStatus(ctx context.Context, r *v2pb.CudaSharedMemoryStatusRequest) (*v2pb.CudaSharedMemoryStatusResponse, error) {
	ns, err := g.s.shm.callerGRPC(ctx, g.s.shm.cudaOff())
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	list, err := g.s.shm.status(ns, r.GetName(), cudaRegion)
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	resp := &v2pb.CudaSharedMemoryStatusResponse{Regions: map[string]*v2pb.CudaSharedMemoryStatusResponse_RegionStatus{}}
	for _, st := range list {
		resp.Regions[st.Name] = &v2pb.CudaSharedMemoryStatusResponse_RegionStatus{Name: st.Name, DeviceId: uint64(st.DeviceID), ByteSize: st.ByteSize}
	}
	return resp, nil
}

func (g grpcService) CudaSharedMemoryRegister(ctx context.Context, r *v2pb.CudaSharedMemoryRegisterRequest) (*v2pb.CudaSharedMemoryRegisterResponse, error) {
	ns, err := g.s.shm.callerGRPC(ctx, g.s.shm.cudaOff())
	if err == nil {
		err = g.s.shm.registerCUDA(ns, r.GetName(), r.GetRawHandle(), r.GetDeviceId(), r.GetByteSize())
	}
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.CudaSharedMemoryRegisterResponse{}, nil
}

func (g grpcService) CudaSharedMemoryUnregister(ctx context.Context, r *v2pb.CudaSharedMemoryUnregisterRequest) (*v2pb.CudaSharedMemoryUnregisterResponse, error) {
	ns, err := g.s.shm.callerGRPC(ctx, g.s.shm.cudaOff())
	if err == nil {
		err = g.s.shm.unregister(ns, r.GetName(), cudaRegion)
	}
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.CudaSharedMemoryUnregisterResponse{}, nil
}
