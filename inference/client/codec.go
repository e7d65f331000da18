package client

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// inferCodec is the gRPC client's codec. A ModelInferRequest is marshalled
// without copying its raw_input_contents: the other fields are encoded by
// protobuf, and each raw input follows as a buffer over the caller's own
// memory (its field tag and length in a small buffer before it), which is
// the same encoding, fields in number order. A batch of 256 images is 192 MB:
// this saves a copy of it per request. Everything else goes through the
// standard codec.
type inferCodec struct{ std encoding.CodecV2 }

func codecOption() grpc.CallOption {
	return grpc.ForceCodecV2(inferCodec{std: encoding.GetCodecV2("proto")})
}

func (c inferCodec) Name() string { return c.std.Name() }

func (c inferCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.std.Unmarshal(data, v) }

// rawInputField is ModelInferRequest.raw_input_contents's field number.
const rawInputField = 7

func (c inferCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*v2pb.ModelInferRequest)
	if !ok || len(r.RawInputContents) == 0 {
		return c.std.Marshal(v)
	}
	parts, err := inferParts(r)
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, len(parts))
	for i, p := range parts {
		out[i] = mem.SliceBuffer(p)
	}
	return out, nil
}

// inferParts encodes r in pieces: its fields other than
// raw_input_contents, then each raw input's tag and length followed by the
// input itself (the caller's memory, not copied; an empty one is left out).
func inferParts(r *v2pb.ModelInferRequest) ([][]byte, error) {
	head, err := proto.Marshal(&v2pb.ModelInferRequest{
		ModelName: r.ModelName, ModelVersion: r.ModelVersion, Id: r.Id,
		Parameters: r.Parameters, Inputs: r.Inputs, Outputs: r.Outputs,
	})
	if err != nil {
		return nil, err
	}
	parts := [][]byte{head}
	for _, b := range r.RawInputContents {
		tag := protowire.AppendTag(nil, rawInputField, protowire.BytesType)
		parts = append(parts, protowire.AppendVarint(tag, uint64(len(b))))
		if len(b) > 0 {
			parts = append(parts, b)
		}
	}
	return parts, nil
}
