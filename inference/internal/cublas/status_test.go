package cublas

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStatus(t *testing.T) {
	tests := []struct {
		name string
		s    Status
		want string
	}{
		{"known", StatusExecutionFailed, "cublas: CUBLAS_STATUS_EXECUTION_FAILED (13)"},
		{"unknown", Status(99), "cublas: status 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.s.Error())
			assert.True(t, errors.Is(fmt.Errorf("gemm: %w", tt.s), tt.s))
		})
	}
}
