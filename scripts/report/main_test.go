package main

import (
	"testing"

	"github.com/inferbench/inferbench/scripts/internal/maintest"
)

func TestMain(m *testing.M) { maintest.Run(m, main) }

func TestExitStatus(t *testing.T) {
	maintest.ExitStatus(t, "report", []maintest.Case{
		{Name: "-h prints the usage and succeeds", Args: []string{"-h"}, Want: 0, Stderr: "usage: report"},
		{Name: "an unknown flag fails", Args: []string{"-no-such-flag"}, Want: 1, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "index -h prints its usage", Args: []string{"index", "-h"}, Want: 0, Stderr: "usage: report index"},
		{Name: "headline -h prints its usage", Args: []string{"headline", "-h"}, Want: 0, Stderr: "usage: report headline"},
		{Name: "index with an unknown flag fails", Args: []string{"index", "-no-such-flag"}, Want: 1, Stderr: "flag provided but not defined: -no-such-flag"},
		{Name: "headline -check needs a file to check", Args: []string{"headline", "-check"}, Want: 1, Stderr: "-check needs -o or -readme"},
	})
}
