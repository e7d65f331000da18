//go:build gateplant

package inference

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGatePlantParse(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"250", 250 * time.Nanosecond, false},
		{"-1", 0, true},
		{"2.5", 0, true},
		{"250ns", 0, true},
	}
	for _, tt := range tests {
		got, err := parsePlant(tt.in)
		if tt.wantErr {
			assert.Error(t, err, "parsePlant(%q)", tt.in)
			continue
		}
		require.NoError(t, err, "parsePlant(%q)", tt.in)
		assert.Equal(t, tt.want, got, "parsePlant(%q)", tt.in)
	}
}

// TestGatePlantSpin: the planted delay lasts at least as long as asked
// (an upper bound would be a timing assertion on a shared machine).
func TestGatePlantSpin(t *testing.T) {
	const d = 2 * time.Millisecond
	start := time.Now()
	spin(d)
	assert.GreaterOrEqual(t, time.Since(start), d)
}
