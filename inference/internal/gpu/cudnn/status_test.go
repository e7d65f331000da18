package cudnn

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStatusIs(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"same code", StatusBadParam, StatusBadParam, true},
		{"code in group", Status(2003), StatusBadParam, true},
		{"wrapped code in group", fmt.Errorf("op: %w", Status(5001)), StatusExecutionFailed, true},
		{"other group", Status(3000), StatusBadParam, false},
		{"group is not a code", StatusBadParam, Status(2003), false},
		{"not a status", errors.New("x"), StatusBadParam, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, errors.Is(tt.err, tt.target), "errors.Is(%v, %v)", tt.err, tt.target)
		})
	}
}

func TestStatusError(t *testing.T) {
	assert.Contains(t, Status(3000).Error(), "cudnn: status 3000")
}
