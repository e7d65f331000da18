package protocol

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Who may call the shared-memory API. Each call (register, unregister,
// status, and an inference request whose tensors name regions) passes three
// checks, in order:
//
//  1. The API is on (SharedMemoryLimits.Enabled); if not, the call is
//     answered as by a server without the extensions.
//  2. When a required header is set (SharedMemoryLimits.Header, as Triton's
//     --http-restricted-api and --grpc-restricted-protocol with
//     "shared-memory:key=value"), the call carries it with the server's
//     value, or is refused: 403, PermissionDenied. Over gRPC the metadata key
//     is the header's name, or Triton's spelling of it:
//     "triton-grpc-protocol-" and the name. (Triton answers gRPC calls
//     without it Unavailable, which clients retry; a refusal is not worth
//     retrying.)
//  3. Its namespace is the value of NamespaceHeader ("" without it): a
//     region belongs to the namespace its register call named, and only
//     calls of that namespace see it in status answers, use it in requests
//     or unregister it; unregistering every region unregisters the caller's.
//     Two namespaces may use one region name, each for its own region. A
//     namespace is a name, not a secret the server checks: a client that
//     knows another's namespace acts as that client, so clients that must be
//     kept apart choose values the others cannot guess.

// NamespaceHeader is the HTTP header (gRPC metadata key) that names a call's
// shared-memory namespace; see shmaccess.go.
const NamespaceHeader = "inferbench-shm-namespace"

// MaxNamespaceBytes bounds a shared-memory namespace.
const MaxNamespaceBytes = 255

// grpcRestrictedPrefix is how Triton's clients send a restricted protocol's
// header over gRPC: this prefix, then the header's name.
const grpcRestrictedPrefix = "triton-grpc-protocol-"

var (
	errSystemOff = &Error{Status: http.StatusBadRequest, Code: codes.Unimplemented, Msg: "system shared memory is turned off on this server"}
	errCUDAOff   = &Error{Status: http.StatusBadRequest, Code: codes.Unimplemented, Msg: "CUDA shared memory is turned off on this server"}
)

// canonicalNamespaceHeader is NamespaceHeader as net/http keys it.
var canonicalNamespaceHeader = textproto.CanonicalMIMEHeaderKey(NamespaceHeader)

// ParseRequiredHeader reads the required header of the shared-memory API,
// "name=value" (cmd/inferbench serve's -shm-header): the name is 1 to 64
// lower-case letters, digits, '-', '_' or '.', and not a name gRPC reserves
// (grpc-*, *-bin) or NamespaceHeader; upper-case letters are lowered, as
// HTTP/2 sends names. The value is 1 to 1024 printable ASCII characters, as
// gRPC metadata carries them.
func ParseRequiredHeader(s string) (name, value string, err error) {
	name, value, ok := strings.Cut(s, "=")
	name = strings.ToLower(name)
	if !ok || name == "" || len(name) > 64 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" ||
		strings.HasPrefix(name, "grpc-") || strings.HasSuffix(name, "-bin") || name == NamespaceHeader {
		return "", "", fmt.Errorf("required header %q: want name=value, the name 1 to 64 of a-z, 0-9, '-', '_', '.', not grpc-*, *-bin or %s", s, NamespaceHeader)
	}
	if value == "" || len(value) > 1024 || strings.IndexFunc(value, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return "", "", fmt.Errorf("required header %q: want a value of 1 to 1024 printable ASCII characters", name)
	}
	return name, value, nil
}

// shmAccess is the registry's fence: the required header, if any.
type shmAccess struct {
	header     string // lower case; "" requires none
	httpHeader string // header as net/http keys it
	grpcTriton string // Triton's gRPC spelling of header
	value      []byte
}

func newSHMAccess(l SharedMemoryLimits) shmAccess {
	if l.Header == "" {
		return shmAccess{}
	}
	h := strings.ToLower(l.Header)
	return shmAccess{header: h, httpHeader: textproto.CanonicalMIMEHeaderKey(h), grpcTriton: grpcRestrictedPrefix + h, value: []byte(l.HeaderValue)}
}

// check fails unless one of values is the required header's value.
func (a *shmAccess) check(values ...[]string) error {
	if a.header == "" {
		return nil
	}
	for _, vs := range values {
		for _, v := range vs {
			if subtle.ConstantTimeCompare([]byte(v), a.value) == 1 {
				return nil
			}
		}
	}
	return &Error{Status: http.StatusForbidden, Code: codes.PermissionDenied,
		Msg: fmt.Sprintf("the shared-memory API is restricted on this server: expecting header %q with the server's value", a.header)}
}

// namespace checks the values of a call's NamespaceHeader: none or one, of
// at most MaxNamespaceBytes.
func namespace(values []string) (string, error) {
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", badRequest("header %s: %d values, want one", NamespaceHeader, len(values))
	case len(values[0]) > MaxNamespaceBytes:
		return "", badRequest("header %s: %d bytes, want at most %d", NamespaceHeader, len(values[0]), MaxNamespaceBytes)
	}
	return values[0], nil
}

// callerHTTP admits an HTTP call of the API (off is the error to answer
// when it is turned off, or nil) and returns its namespace.
func (r *shmRegistry) callerHTTP(h http.Header, off error) (string, error) {
	if off != nil {
		return "", off
	}
	if err := r.access.check(h[r.access.httpHeader]); err != nil {
		return "", err
	}
	return namespace(h[canonicalNamespaceHeader])
}

// callerGRPC admits a gRPC call of the API (off as for callerHTTP) and
// returns its namespace.
func (r *shmRegistry) callerGRPC(ctx context.Context, off error) (string, error) {
	if off != nil {
		return "", off
	}
	if r.access.header != "" {
		if err := r.access.check(metadata.ValueFromIncomingContext(ctx, r.access.header), metadata.ValueFromIncomingContext(ctx, r.access.grpcTriton)); err != nil {
			return "", err
		}
	}
	return namespace(metadata.ValueFromIncomingContext(ctx, NamespaceHeader))
}

// systemOff is the error a call of the system shared-memory API is
// answered with, or nil when it is on.
func (r *shmRegistry) systemOff() error {
	if !r.enabled() {
		return errSystemOff
	}
	return nil
}

// cudaOff is systemOff's twin for the CUDA shared-memory API (on whenever
// the API is: registration itself needs the cuda back-end).
func (r *shmRegistry) cudaOff() error {
	if !r.limits.Enabled {
		return errCUDAOff
	}
	return nil
}

// refsOff is the error an inference request that names regions is answered
// with while the API is off.
func (r *shmRegistry) refsOff(in, out *shmRef) error {
	if r.limits.Enabled {
		return nil
	}
	ref := in
	if ref == nil {
		ref = out
	}
	return badRequest("shared-memory region %q: shared memory is turned off on this server; send the tensor in the request", ref.region)
}

// shmCallerHTTP admits an HTTP inference request whose input or output
// names a region (in or out not nil) and puts both in its namespace.
func (s *Service) shmCallerHTTP(r *http.Request, in, out *shmRef) error {
	if in == nil && out == nil {
		return nil
	}
	ns, err := s.shm.callerHTTP(r.Header, s.shm.refsOff(in, out))
	return scope(ns, err, in, out)
}

// shmCallerGRPC is shmCallerHTTP for a gRPC request.
func (s *Service) shmCallerGRPC(ctx context.Context, in, out *shmRef) error {
	if in == nil && out == nil {
		return nil
	}
	ns, err := s.shm.callerGRPC(ctx, s.shm.refsOff(in, out))
	return scope(ns, err, in, out)
}

func scope(ns string, err error, in, out *shmRef) error {
	if err != nil {
		return err
	}
	if in != nil {
		in.ns = ns
	}
	if out != nil {
		out.ns = ns
	}
	return nil
}
