package main

import (
	"testing"

	"github.com/inferbench/inferbench/scripts/internal/maintest"
)

func TestMain(m *testing.M) { maintest.Run(m, main) }

func TestExitStatus(t *testing.T) {
	maintest.ExitStatus(t, "gate", []maintest.Case{
		{Name: "-h prints the usage and succeeds", Args: []string{"-h"}, Want: 0, Stderr: "usage: gate"},
		{Name: "an unknown flag fails", Args: []string{"-no-such-flag"}, Want: 2, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "files of different settings are refused", Args: []string{fixtures + "/resnet18-250.txt", fixtures + "/tiny-64.txt"}, Want: 2, Stderr: "model: resnet18 in base, tiny in head"},
	})
}
