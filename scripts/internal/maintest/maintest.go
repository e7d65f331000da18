// Package maintest checks a command's exit status and standard error the way
// a user sees them: the test binary runs the command's own main in a child
// process of itself.
//
//  1. The package's TestMain calls Run(m, main): in the child (marked by an
//     environment variable) it runs main and exits 0 if main returns.
//  2. A test calls ExitStatus with cases of arguments, the status each must
//     exit with and a part of what it must print on standard error.
package maintest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const childEnv = "INFERBENCH_RUN_MAIN"

// Run is a TestMain: main in the child process, the tests otherwise.
func Run(m *testing.M, main func()) {
	if os.Getenv(childEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Case is one run of the command.
type Case struct {
	Name   string
	Args   []string
	Want   int    // exit status
	Stderr string // part of standard error
}

// ExitStatus runs the command (called name in messages) once per case.
func ExitStatus(t *testing.T, name string, cases []Case) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tt.Args...)
			cmd.Env = append(os.Environ(), childEnv+"=1")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			got := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				got = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.Want, got, "exit status of %s %v; stderr:\n%s", name, tt.Args, stderr.String())
			assert.Contains(t, stderr.String(), tt.Stderr)
		})
	}
}
