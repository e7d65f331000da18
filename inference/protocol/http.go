package protocol

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// HTTPHandler serves the HTTP/REST API:
//
//	GET  /v2/health/live                                     200 while the process serves
//	GET  /v2/health/ready                                    200 when ready, else 400
//	GET  /v2                                                 server metadata
//	GET  /v2/models/{name}[/versions/{version}]              model metadata
//	GET  /v2/models/{name}[/versions/{version}]/ready        200 when ready, else 400
//	POST /v2/models/{name}[/versions/{version}]/infer        inference
//	GET  /v2/models/{name}[/versions/{version}]/config       configuration (Triton's ModelConfig)
//	GET  /v2/models[/{name}[/versions/{version}]]/stats      statistics (Triton's ModelStatistics)
//	GET  /v2/systemsharedmemory[/region/{name}]/status       registered regions
//	POST /v2/systemsharedmemory/region/{name}/register       map a region
//	POST /v2/systemsharedmemory[/region/{name}]/unregister   unmap one or all
//	     /v2/cudasharedmemory/...                            the same for CUDA regions
//
// The shared-memory endpoints answer only when shared memory is on, and
// only calls it admits (SharedMemoryLimits, shmaccess.go).
//
// Health answers have empty bodies (200 true, 400 false, as the protocol
// says); every error elsewhere is {"error": "..."} with its status.
func (s *Service) HTTPHandler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Service) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		// Refused before anything reads the body, so net/http sends no
		// 100 Continue to a client that waits for one, and closes the
		// connection after the answer instead of reading the body.
		s.httpError(w, tooLarge("request body of %d bytes larger than the limit of %d bytes", r.ContentLength, s.opts.MaxBodyBytes))
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) == 0 || parts[0] != "v2" {
		s.httpError(w, notFound("no such endpoint %q (the API is under /v2)", r.URL.Path))
		return
	}
	parts = parts[1:]
	switch {
	case len(parts) == 0:
		s.get(w, r, func() any {
			return map[string]any{"name": s.opts.Name, "version": s.opts.Version, "extensions": s.Extensions()}
		})
	case len(parts) == 2 && parts[0] == "health" && parts[1] == "live":
		s.health(w, r, true)
	case len(parts) == 2 && parts[0] == "health" && parts[1] == "ready":
		s.health(w, r, s.Ready())
	case len(parts) == 2 && parts[0] == "models" && parts[1] == "stats":
		s.serveStats(w, r, "", "")
	case len(parts) >= 2 && parts[0] == "models":
		s.serveModel(w, r, parts[1:])
	case len(parts) >= 2 && parts[0] == "systemsharedmemory":
		s.serveSystemSHM(w, r, parts[1:])
	case len(parts) >= 2 && parts[0] == "cudasharedmemory":
		s.serveCudaSHM(w, r, parts[1:])
	default:
		s.httpError(w, notFound("no such endpoint %q", r.URL.Path))
	}
}

// serveModel routes {name}[/versions/{version}][/ready|/infer|/config|/stats].
func (s *Service) serveModel(w http.ResponseWriter, r *http.Request, parts []string) {
	name, version, action := parts[0], "", ""
	rest := parts[1:]
	if len(rest) >= 2 && rest[0] == "versions" {
		version, rest = rest[1], rest[2:]
	}
	switch len(rest) {
	case 0:
	case 1:
		action = rest[0]
	default:
		s.httpError(w, notFound("no such endpoint %q", r.URL.Path))
		return
	}
	m, err := s.lookup(name, version)
	switch action {
	case "":
		if err != nil {
			s.httpError(w, err)
			return
		}
		s.get(w, r, func() any { return metadataJSON(m) })
	case "ready":
		s.health(w, r, err == nil && s.Ready())
	case "config":
		if err != nil {
			s.httpError(w, err)
			return
		}
		s.get(w, r, func() any { return configJSON(m.config()) })
	case "stats":
		s.serveStats(w, r, name, version)
	case "infer":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			s.httpError(w, &Error{Status: http.StatusMethodNotAllowed, Msg: "inference requests are POSTs"})
			return
		}
		if err != nil {
			s.httpError(w, err) // net/http discards or cuts off the unread body
			return
		}
		s.infer(w, r, m)
	default:
		s.httpError(w, notFound("no such endpoint %q", r.URL.Path))
	}
}

// get answers a GET with the JSON of body().
func (s *Service) get(w http.ResponseWriter, r *http.Request, body func() any) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		s.httpError(w, &Error{Status: http.StatusMethodNotAllowed, Msg: r.Method + " not allowed here"})
		return
	}
	b, err := json.Marshal(body())
	if err != nil {
		s.httpError(w, &Error{Status: http.StatusInternalServerError, Msg: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, b) // net/http sends no body for HEAD
}

// writeJSON answers with status and the JSON body b, its type and length
// in the headers (set others before).
func writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// health answers a health probe: 200 for true, 400 for false, empty body.
func (s *Service) health(w http.ResponseWriter, r *http.Request, ok bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		s.httpError(w, &Error{Status: http.StatusMethodNotAllowed, Msg: r.Method + " not allowed here"})
		return
	}
	w.Header().Set("Content-Length", "0")
	if ok {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusBadRequest)
	}
}

type tensorMetadataJSON struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

func metadataJSON(m *Model) any {
	return struct {
		Name     string               `json:"name"`
		Versions []string             `json:"versions"`
		Platform string               `json:"platform"`
		Inputs   []tensorMetadataJSON `json:"inputs"`
		Outputs  []tensorMetadataJSON `json:"outputs"`
	}{
		Name: m.name, Versions: []string{m.version}, Platform: Platform,
		Inputs:  []tensorMetadataJSON{{InputName, FP32, m.InputShape()}},
		Outputs: []tensorMetadataJSON{{OutputName, FP32, m.OutputShape()}},
	}
}

// httpError writes err as {"error": "..."} with its status, and Retry-After
// when the request may succeed later. The message is written as the id is
// (appendJSONString): what it quotes of the request reads as it was sent.
func (s *Service) httpError(w http.ResponseWriter, err error) {
	e := asError(err)
	if e.Status == StatusClientClosed {
		return // nobody is listening
	}
	b := append(appendJSONString([]byte(`{"error":`), e.Msg), '}')
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == 0 {
		e.Status = http.StatusInternalServerError
	}
	s.errs.addHTTP(e.Status)
	writeJSON(w, e.Status, b)
}
