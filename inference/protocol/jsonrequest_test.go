package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeStd decodes b as the HTTP front door did before requestDecoder:
// encoding/json, numbers as json.Number, white space only after the object.
func decodeStd(b []byte) (*inferRequestJSON, error) {
	var j inferRequestJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		return nil, err
	}
	if rest := bytes.Trim(b[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, fmt.Errorf("%d bytes after the object", len(rest))
	}
	return &j, nil
}

// wideLimits are RequestLimits no request of the tests below reaches.
var wideLimits = RequestLimits{MaxInputs: 1 << 20, MaxOutputs: 1 << 20, MaxParameters: 1 << 20,
	MaxIDBytes: 1 << 20, MaxStringBytes: 1 << 20, MaxDepth: 1 << 10, MaxShapeDims: 1 << 20}

// checkLikeStd checks that requestDecoder decodes what encoding/json decodes,
// the same way, and that what it accepts encoding/json accepts too (unless
// it is tensor data that parseData would refuse).
func checkLikeStd(t *testing.T, b []byte) {
	// One byte a read: every refill path of the decoder runs.
	got, _, err := decodeRequest(iotest.OneByteReader(bytes.NewReader(b)), -1, wideLimits)
	want, stdErr := decodeStd(b)
	if err != nil {
		if stdErr == nil {
			// Refusals of its own: a field twice, a non-scalar parameter,
			// an object in data.
			assert.Regexp(t, "given twice|want a boolean|object inside tensor data", err.Error(), "%q: encoding/json accepts it", b)
		}
		return
	}
	for _, in := range got.Inputs {
		if len(in.Data) > 0 && !json.Valid(in.Data) {
			return // parseData refuses it
		}
	}
	require.NoError(t, stdErr, "%q: requestDecoder accepts it", b)
	assert.Equal(t, want, got, "%q", b)
}

var requestSamples = []string{
	`{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,2,2],"data":[1,2.5e-3,-0,3]}]}`,
	` {"id":"a\u003c\"b\\","parameters":{"timeout":100,"binary_data_output":true,"s":"x","n":null},
	  "inputs":[{"name":"input","datatype":"UINT8","shape":[1,3,2,2],"parameters":{"binary_data_size":12}}],
	  "outputs":[{"name":"logits","parameters":{"binary_data":false}}]} `,
	`{"ID":"upper","Inputs":[{"NAME":"x","Shape":[],"Data":[[1,2],[3,4]]}],"outputs":null,"unknown":{"a":[1,{"b":"c"}]}}`,
	`{"inputs":[null,{"data":null,"shape":null,"parameters":null}],"outputs":[],"id":null}`,
	`{"inputs":[{"data":"text","name":"caf\u00e9 \xff"}]}`,
	`{"parameters":{"k":1,"k":2}}`,
	`{}`,
}

func TestDecodeRequestLikeEncodingJSON(t *testing.T) {
	for _, s := range requestSamples {
		checkLikeStd(t, []byte(s))
	}
	// A request whose data is the bulk of it.
	var data bytes.Buffer
	data.WriteString(`{"inputs":[{"name":"input","datatype":"FP32","shape":[2,3,8,8],"data":[`)
	for i := range 2 * 3 * 8 * 8 {
		fmt.Fprintf(&data, "%d.5,", i)
	}
	data.WriteString(`1]}]}`)
	checkLikeStd(t, data.Bytes())
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range requestSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(checkLikeStd)
}

// TestDecodeRequestRefusals: every bound of RequestLimits, and malformed
// requests, each with its status and the first words of its message.
func TestDecodeRequestRefusals(t *testing.T) {
	lim := RequestLimits{MaxInputs: 2, MaxOutputs: 2, MaxParameters: 2, MaxIDBytes: 4, MaxStringBytes: 10, MaxDepth: 4, MaxShapeDims: 3}.withDefaults()
	cases := []struct {
		body   string
		status int
		msg    string
	}{
		{`{"inputs":[{},{},{}]}`, 413, "more than 2 inputs"},
		{`{"outputs":[{},{},{}]}`, 413, "more than 2 outputs"},
		{`{"parameters":{"a":1,"b":2,"c":3}}`, 413, "more than 2 parameters"},
		{`{"inputs":[{"parameters":{"a":1,"b":2,"c":3}}]}`, 413, "more than 2 parameters"},
		{`{"outputs":[{"parameters":{"a":1,"b":2,"c":3}}]}`, 413, "more than 2 parameters"},
		{`{"id":"12345"}`, 413, "more than 4 bytes in its id"},
		{`{"id":"\u00e9\u00e9\u00e9"}`, 413, "more than 4 bytes in its id"},
		{`{"inputs":[{"name":"12345678901"}]}`, 413, "more than 10 bytes in a string"},
		{`{"12345678901":1}`, 413, "more than 10 bytes in a string"},
		{`{"parameters":{"k":12345678901}}`, 413, "more than 10 bytes in a number"},
		{`{"inputs":[{"shape":[1,2,3,4]}]}`, 413, "more than 3 dimensions"},
		{`{"x":[[[[1]]]]}`, 413, "more than 4 levels of nesting"},
		{`{"inputs":[{"data":[[1]]}]}`, 413, "more than 4 levels of nesting"},
		{`{"id":"ab`, 400, "the JSON ends early"},
		{``, 400, "the JSON ends early"},
		{`[]`, 400, "want '{'"},
		{`{"id":1}`, 400, "want '\"'"},
		{`{"inputs":{}}`, 400, "want '['"},
		{`{"inputs":[{"shape":[1.5]}]}`, 400, "not a 64-bit integer"},
		{`{"inputs":[{"shape":["1"]}]}`, 400, "want an integer"},
		{`{"parameters":{"k":[1]}}`, 400, "want a boolean, number or string"},
		{`{"id":"a","id":"b"}`, 400, `field "id" given twice`},
		{`{"inputs":[],"INPUTS":[]}`, 400, `field "inputs" given twice`},
		{`{"inputs":[{"data":[{}]}]}`, 400, "object inside tensor data"},
		{`{"id":"a` + "\n" + `"}`, 400, "control character"},
		{`{"parameters":{"k":tru}}`, 400, "want true"},
		{`{"parameters":{"k":01}}`, 400, "want a value"},
		{`{"parameters":{"k":-}}`, 400, "want a value"},
		{`{} {}`, 400, "unexpected \"{}\" after the inference request JSON"},
		{`{"a":1,}`, 400, "want '\"'"},
	}
	for _, tc := range cases {
		t.Run(tc.body, func(t *testing.T) {
			_, _, err := decodeRequest(strings.NewReader(tc.body), -1, lim)
			require.Error(t, err)
			e := asError(err)
			assert.Equal(t, tc.status, e.Status, "%v", err)
			assert.Contains(t, e.Msg, tc.msg)
		})
	}
	// A read error is the body's failure, not the JSON's.
	_, _, err := decodeRequest(io.MultiReader(strings.NewReader(`{"id":`), iotest.ErrReader(&http.MaxBytesError{Limit: 7})), -1, lim)
	assert.Equal(t, http.StatusRequestEntityTooLarge, asError(err).Status, "%v", err)
}

// BenchmarkDecodeJSONRequest decodes a request with one 224x224 image as
// JSON numbers, with requestDecoder (decoder=bounded) and with encoding/json
// after reading the whole body, as the front door did before
// (decoder=encoding-json). Neither parses the data's numbers (parseData does).
func BenchmarkDecodeJSONRequest(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"id":"bench","inputs":[{"name":"input","datatype":"FP32","shape":[1,3,224,224],"data":[`)
	for i := range 3 * 224 * 224 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, "%.4f", float32(i%251)/251)
	}
	body.WriteString(`]}],"outputs":[{"name":"logits"}]}`)
	lim := RequestLimits{}.withDefaults()
	b.Run("decoder=bounded", func(b *testing.B) {
		b.SetBytes(int64(body.Len()))
		for b.Loop() {
			if _, _, err := decodeRequest(bytes.NewReader(body.Bytes()), int64(body.Len()), lim); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decoder=encoding-json", func(b *testing.B) {
		b.SetBytes(int64(body.Len()))
		for b.Loop() {
			head, err := io.ReadAll(bytes.NewReader(body.Bytes()))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := decodeStd(head); err != nil {
				b.Fatal(err)
			}
		}
	})
}
