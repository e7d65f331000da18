package client

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	"github.com/inferbench/inferbench/inference/v2pb"
)

func TestCodecMarshalsAsProtobufWithoutCopyingRawInputs(t *testing.T) {
	c := inferCodec{std: encoding.GetCodecV2("proto")}
	raw := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for name, r := range map[string]*v2pb.ModelInferRequest{
		"one raw input": {ModelName: "m", ModelVersion: "1", Id: "x",
			Parameters:       map[string]*v2pb.InferParameter{"timeout": {ParameterChoice: &v2pb.InferParameter_Int64Param{Int64Param: 7}}},
			Inputs:           []*v2pb.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 2}}},
			Outputs:          []*v2pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}},
			RawInputContents: [][]byte{raw}},
		"several, one empty": {ModelName: "m", RawInputContents: [][]byte{raw, {}, raw[:3]}},
		"no raw input":       {ModelName: "m", Inputs: []*v2pb.ModelInferRequest_InferInputTensor{{Name: "input"}}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := c.Marshal(r)
			require.NoError(t, err)
			var got v2pb.ModelInferRequest
			require.NoError(t, proto.Unmarshal(out.Materialize(), &got))
			assert.True(t, proto.Equal(r, &got), "decoded %v, want %v", &got, r)
			if len(r.RawInputContents) > 0 {
				found := false
				for _, b := range out {
					if d := b.ReadOnlyData(); len(d) == len(raw) && &d[0] == &raw[0] {
						found = true
					}
				}
				assert.True(t, found, "the raw input is sent from the caller's memory, not a copy")
			}
		})
	}
}
