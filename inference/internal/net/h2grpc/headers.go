package h2grpc

import (
	"errors"
	"fmt"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// errMalformed is the error of a malformed request or trailer list: a
// stream error PROTOCOL_ERROR (RFC 9113, 8.1.1).
var errMalformed = errors.New("h2grpc: malformed header list")

// The request pseudo-header fields, as bits of a set.
const (
	pseudoMethod = 1 << iota
	pseudoScheme
	pseudoPath
	pseudoAuthority
)

// checkRequestHeaders checks a request's header list as RFC 9113, 8.2 and
// 8.3 ask: lowercase valid names and valid values; only the request
// pseudo-header fields, each at most once and before every other field;
// :method, :scheme and a non-empty :path present; no connection-specific
// fields; te, if any, "trailers".
func checkRequestHeaders(fields []hpack.HeaderField) error {
	seen, regular := 0, false
	for _, f := range fields {
		if err := checkField(f); err != nil {
			return err
		}
		if f.Name[0] != ':' {
			regular = true
			continue
		}
		bit := 0
		switch f.Name {
		case ":method":
			bit = pseudoMethod
		case ":scheme":
			bit = pseudoScheme
		case ":path":
			bit = pseudoPath
			if f.Value == "" {
				return fmt.Errorf("%w: empty :path", errMalformed)
			}
		case ":authority":
			bit = pseudoAuthority
		default:
			return fmt.Errorf("%w: pseudo-header field %s", errMalformed, f.Name)
		}
		if regular {
			return fmt.Errorf("%w: %s after a regular field", errMalformed, f.Name)
		}
		if seen&bit != 0 {
			return fmt.Errorf("%w: %s twice", errMalformed, f.Name)
		}
		seen |= bit
	}
	if want := pseudoMethod | pseudoScheme | pseudoPath; seen&want != want {
		return fmt.Errorf("%w: :method, :scheme or :path missing", errMalformed)
	}
	return nil
}

// checkTrailers checks a trailer list: valid fields, no pseudo-header.
func checkTrailers(fields []hpack.HeaderField) error {
	for _, f := range fields {
		if err := checkField(f); err != nil {
			return err
		}
		if f.Name[0] == ':' {
			return fmt.Errorf("%w: pseudo-header field %s in trailers", errMalformed, f.Name)
		}
	}
	return nil
}

// checkField checks one field of a request or trailer list: a name of
// lowercase token characters (after a ':' for a pseudo-header), a value
// without NUL, CR or LF, and not a connection-specific field.
func checkField(f hpack.HeaderField) error {
	name := f.Name
	if len(name) > 1 && name[0] == ':' {
		name = name[1:]
	}
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("%w: field name %q", errMalformed, f.Name)
	}
	for i := 0; i < len(name); i++ {
		if 'A' <= name[i] && name[i] <= 'Z' {
			return fmt.Errorf("%w: field name %q has uppercase letters", errMalformed, f.Name)
		}
	}
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		return fmt.Errorf("%w: value of %s", errMalformed, f.Name)
	}
	switch f.Name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return fmt.Errorf("%w: connection-specific field %s", errMalformed, f.Name)
	case "te":
		if f.Value != "trailers" {
			return fmt.Errorf("%w: te %q", errMalformed, f.Value)
		}
	}
	return nil
}
