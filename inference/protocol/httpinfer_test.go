package protocol

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAppendJSONString: what appendJSONString writes reads back as the same
// string, and HTML's characters stay as they are.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `<>&`, "\"\\/\b\f\n\r\t\x00\x1f", "日本語 \u2028\u2029 é", "bad \xff\xfe utf-8"} {
		b := appendJSONString(nil, s)
		require.True(t, json.Valid(b), "%q", b)
		var got, want string
		require.NoError(t, json.Unmarshal(b, &got))
		std, err := json.Marshal(s)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(std, &want))
		assert.Equal(t, want, got, "what encoding/json reads back")
		assert.NotContains(t, string(b), `\u003c`)
	}
	assert.Equal(t, `"<a href=\"x\">&amp;</a>"`, string(appendJSONString(nil, `<a href="x">&amp;</a>`)))
}
