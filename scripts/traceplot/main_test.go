package main

import (
	"testing"

	"github.com/inferbench/inferbench/scripts/internal/maintest"
)

func TestMain(m *testing.M) { maintest.Run(m, main) }

func TestExitStatus(t *testing.T) {
	maintest.ExitStatus(t, "traceplot", []maintest.Case{
		{Name: "-h prints the usage and succeeds", Args: []string{"-h"}, Want: 0, Stderr: "Usage of traceplot"},
		{Name: "an unknown flag fails", Args: []string{"-no-such-flag"}, Want: 2, Stderr: "flag provided but not defined: -no-such-flag"},
	})
}
