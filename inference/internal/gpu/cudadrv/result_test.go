package cudadrv

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSticky(t *testing.T) {
	tests := []struct {
		name string
		code int
		want bool
	}{
		{"illegal address", 700, true},
		{"launch failed", 719, true},
		{"out of memory", 2, false},
		{"invalid value", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Sticky(tt.code), "Sticky(%d)", tt.code)
		})
	}
}

func TestResultIs(t *testing.T) {
	err := fmt.Errorf("copy: %w", ErrIllegalAddress)
	assert.True(t, errors.Is(err, ErrIllegalAddress))
	assert.False(t, errors.Is(err, ErrOutOfMemory))
	assert.Contains(t, Result(700).Error(), "700")
}
