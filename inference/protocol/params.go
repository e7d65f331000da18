package protocol

import (
	"encoding/json"
	"math"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// Parameter names this server understands (Triton's binary tensor data and
// shared-memory extensions and request timeout), and ones it refuses rather
// than ignore, because ignoring them would return something other than what
// was asked.
const (
	paramBinaryDataSize   = "binary_data_size"
	paramBinaryData       = "binary_data"
	paramBinaryDataOutput = "binary_data_output"
	paramTimeout          = "timeout"
	paramClassCount       = "classification"
	paramShmRegion        = "shared_memory_region"
)

// params are parameters from either transport: JSON values decoded with
// UseNumber (bool, json.Number, string) or gRPC InferParameter choices.
type params map[string]any

func grpcParams(m map[string]*v2pb.InferParameter) params {
	if len(m) == 0 {
		return nil
	}
	p := make(params, len(m))
	for k, v := range m {
		switch c := v.GetParameterChoice().(type) {
		case *v2pb.InferParameter_BoolParam:
			p[k] = c.BoolParam
		case *v2pb.InferParameter_Int64Param:
			p[k] = c.Int64Param
		case *v2pb.InferParameter_StringParam:
			p[k] = c.StringParam
		case *v2pb.InferParameter_DoubleParam:
			p[k] = c.DoubleParam
		case *v2pb.InferParameter_Uint64Param:
			p[k] = c.Uint64Param
		default:
			p[k] = nil
		}
	}
	return p
}

// asInt64 reads an integer parameter value.
func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case uint64:
		return int64(x), x <= math.MaxInt64
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case float64:
		return int64(x), x == math.Trunc(x) && math.Abs(x) < 1<<53
	}
	return 0, false
}

// flag reads a boolean parameter: (value, present, error).
func (p params) flag(name string) (bool, bool, error) {
	v, ok := p[name]
	if !ok {
		return false, false, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return false, true, badRequest("parameter %q must be a boolean, got %v", name, v)
	}
	return b, true, nil
}

// refuse fails on request-level parameters this server does not implement
// but that would change the answer (classification), or that belong to a
// tensor (shared memory), so they are never ignored.
func (p params) refuse(where string) error {
	if err := p.refuseTensor(where); err != nil {
		return err
	}
	for _, name := range []string{paramShmRegion, paramShmOffset, paramShmByteSize} {
		if _, ok := p[name]; ok {
			return badRequest("%s: parameter %q belongs to an input or an output, not to the request", where, name)
		}
	}
	return nil
}

// refuseTensor fails on tensor parameters this server does not implement but
// that would change the answer (classification).
func (p params) refuseTensor(where string) error {
	if _, ok := p[paramClassCount]; ok {
		return badRequest("%s: parameter %q is not supported by this server", where, paramClassCount)
	}
	return nil
}
