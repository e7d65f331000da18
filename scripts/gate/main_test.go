package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain runs the command itself instead of the tests when
// INFERBENCH_RUN_MAIN is set, so that a test can check main's exit status.
func TestMain(m *testing.M) {
	if os.Getenv("INFERBENCH_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		want   int
		stderr string
	}{
		{"-h prints the usage and succeeds", []string{"-h"}, 0, "usage: gate"},
		{"an unknown flag fails", []string{"-no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		{"files of different settings are refused", []string{fixtures + "/resnet18-250.txt", fixtures + "/tiny-64.txt"}, 2, "model: resnet18 in base, tiny in head"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tt.args...)
			cmd.Env = append(os.Environ(), "INFERBENCH_RUN_MAIN=1")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			got := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				got = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, got, "exit status of gate %v; stderr:\n%s", tt.args, stderr.String())
			assert.Contains(t, stderr.String(), tt.stderr)
		})
	}
}
