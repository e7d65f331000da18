package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaxIDBytesBoundsRequestIDs: -max-id-bytes sets the longest request id
// serve takes; one at the bound is echoed as sent (no HTML escaping), one
// byte more is refused with 413.
func TestMaxIDBytesBoundsRequestIDs(t *testing.T) {
	s := startServer(t, "-backend", "nop", "-model", "tiny", "-size", "32x32", "-max-id-bytes", "8")
	infer := func(id string) (int, map[string]any) {
		body := `{"id":` + mustJSON(t, id) + `,"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,32,32],"data":[` +
			strings.TrimSuffix(strings.Repeat("0,", 3*32*32), ",") + `]}]}`
		resp, err := http.Post("http://"+s.http+"/v2/models/tiny/infer", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
		if resp.StatusCode == http.StatusOK {
			assert.True(t, bytes.Contains(raw, []byte(`"id":"<a&b>`)), "the id as sent, unescaped: %s", raw)
		}
		return resp.StatusCode, out
	}
	status, out := infer("<a&b>xyz")
	assert.Equal(t, http.StatusOK, status, "%v", out)
	assert.Equal(t, "<a&b>xyz", out["id"])
	status, out = infer("<a&b>xyz9")
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, "%v", out)
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
