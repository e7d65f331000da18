package protocol

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"

	"github.com/inferbench/inferbench/inference/protocol/v2pb"
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
	name, action, ok := shmRoute(parts)
	switch {
	case !ok:
		s.httpError(w, notFound("no such endpoint %q", r.URL.Path))
	case action == "status":
		list, err := s.shm.status(name)
		if err != nil {
			s.httpError(w, err)
			return
		}
		if list == nil {
			list = []regionStatus{}
		}
		s.get(w, r, func() any { return list })
	case action == "register" && name != "":
		if !s.post(w, r) {
			return
		}
		req, err := decodeRegister(http.MaxBytesReader(w, r.Body, maxRegisterBody))
		if err == nil {
			err = s.shm.register(name, req.key, req.offset, req.size)
		}
		s.answerEmpty(w, err)
	case action == "unregister":
		if !s.post(w, r) {
			return
		}
		s.answerEmpty(w, s.shm.unregister(name))
	default:
		s.httpError(w, notFound("no such endpoint %q", r.URL.Path))
	}
}

// serveCudaSHM answers the CUDA shared-memory API: not supported.
func (s *Service) serveCudaSHM(w http.ResponseWriter, r *http.Request, parts []string) {
	if _, _, ok := shmRoute(parts); !ok {
		s.httpError(w, notFound("no such endpoint %q", r.URL.Path))
		return
	}
	s.httpError(w, errNoCudaSHM)
}

// errNoCudaSHM is every answer of the CUDA shared-memory API.
var errNoCudaSHM = &Error{Status: http.StatusNotImplemented, Code: codes.Unimplemented,
	Msg: "CUDA shared memory is not supported by this server; use system shared memory (the system_shared_memory extension)"}

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

func uintField(name string, n json.Number) (uint64, error) {
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, badRequest("shared-memory registration: %q %s, want a non-negative integer", name, n)
	}
	return v, nil
}

func (g grpcService) SystemSharedMemoryStatus(_ context.Context, r *v2pb.SystemSharedMemoryStatusRequest) (*v2pb.SystemSharedMemoryStatusResponse, error) {
	list, err := g.s.shm.status(r.GetName())
	if err != nil {
		return nil, g.s.grpcError(err)
	}
	resp := &v2pb.SystemSharedMemoryStatusResponse{Regions: map[string]*v2pb.SystemSharedMemoryStatusResponse_RegionStatus{}}
	for _, st := range list {
		resp.Regions[st.Name] = &v2pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: st.Name, Key: st.Key, Offset: st.Offset, ByteSize: st.ByteSize}
	}
	return resp, nil
}

func (g grpcService) SystemSharedMemoryRegister(_ context.Context, r *v2pb.SystemSharedMemoryRegisterRequest) (*v2pb.SystemSharedMemoryRegisterResponse, error) {
	if err := g.s.shm.register(r.GetName(), r.GetKey(), r.GetOffset(), r.GetByteSize()); err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.SystemSharedMemoryRegisterResponse{}, nil
}

func (g grpcService) SystemSharedMemoryUnregister(_ context.Context, r *v2pb.SystemSharedMemoryUnregisterRequest) (*v2pb.SystemSharedMemoryUnregisterResponse, error) {
	if err := g.s.shm.unregister(r.GetName()); err != nil {
		return nil, g.s.grpcError(err)
	}
	return &v2pb.SystemSharedMemoryUnregisterResponse{}, nil
}

func (g grpcService) CudaSharedMemoryStatus(context.Context, *v2pb.CudaSharedMemoryStatusRequest) (*v2pb.CudaSharedMemoryStatusResponse, error) {
	return nil, g.s.grpcError(errNoCudaSHM)
}

func (g grpcService) CudaSharedMemoryRegister(context.Context, *v2pb.CudaSharedMemoryRegisterRequest) (*v2pb.CudaSharedMemoryRegisterResponse, error) {
	return nil, g.s.grpcError(errNoCudaSHM)
}

func (g grpcService) CudaSharedMemoryUnregister(context.Context, *v2pb.CudaSharedMemoryUnregisterRequest) (*v2pb.CudaSharedMemoryUnregisterResponse, error) {
	return nil, g.s.grpcError(errNoCudaSHM)
}
