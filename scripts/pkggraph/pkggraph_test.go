package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/packages.md")

const committed = "../../docs/packages.md"

// TestCommittedGraphIsCurrent regenerates the graph with the go command and
// compares it with docs/packages.md (go test -update rewrites it).
func TestCommittedGraphIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	var out, errs bytes.Buffer
	require.NoError(t, run(nil, &out, &errs), "stderr: %s", errs.String())
	if *update {
		require.NoError(t, os.WriteFile(committed, out.Bytes(), 0o644))
	}
	want, err := os.ReadFile(committed)
	require.NoError(t, err)
	assert.Equal(t, string(want), out.String(), "docs/packages.md is stale: go run ./scripts/pkggraph > docs/packages.md")
}

// listing is go list output in listFormat for a made-up module layout.
const listing = module + "\t" + module + "\tfalse\t0\t\tfmt " + module + "/inference " + module + "/inference/cuda\n" +
	module + "/inference\t" + module + "\tfalse\t3\tfmt " + module + "/inference/backend\t" + module + "/inference/nop\n" +
	module + "/inference/backend\t" + module + "\tfalse\t1\terrors\t\n" +
	module + "/inference/nop\t" + module + "\tfalse\t1\t" + module + "/inference/backend\t\n" +
	module + "/inference/cuda\t" + module + "\tfalse\t2\tC " + module + "/inference/backend gorgonia.org/cu\t\n" +
	"gorgonia.org/cu\tgorgonia.org/cu\tfalse\t9\tC fmt\t\n" +
	"fmt\t\ttrue\t9\terrors\t\n"

func TestGraphFromListing(t *testing.T) {
	def, err := parse(strings.NewReader(strings.ReplaceAll(listing, " gorgonia.org/cu", "")))
	require.NoError(t, err)
	cuda, err := parse(strings.NewReader(listing))
	require.NoError(t, err)
	g := newGraph()
	g.add(def, false)
	g.add(cuda, true)
	var b bytes.Buffer
	require.NoError(t, g.write(&b))
	out := b.String()
	tests := []struct {
		name, want string
	}{
		{"module packages are boxes", `p1["inference"]`},
		{"the root suite is labelled", `p0["(root: benchmark suite and end-to-end tests)"]`},
		{"other modules are rounded", `m0("gorgonia.org/cu")`},
		{"an import in both builds is an arrow", "p1 --> p2"},
		{"a cuda-only import is dotted", "p3 -.-> m0"},
		{"the root's arrows are its tests' imports", "p0 --> p3"},
		{"a package's own imports", "p4 --> p2"},
		{"the list marks cuda-only imports", "- `inference/cuda` imports `inference/backend`, `gorgonia.org/cu` (cuda)"},
		{"a leaf says so", "- `inference/backend` imports nothing of this module or another"},
	}
	for _, tt := range tests {
		assert.Contains(t, out, tt.want, tt.name)
	}
	assert.NotContains(t, out, `"fmt"`, "the standard library is left out")
	assert.NotContains(t, out, "p1 --> p4", "test imports of a package with code are left out")
}

func TestParseRejectsOtherFormats(t *testing.T) {
	_, err := parse(strings.NewReader("just a path\n"))
	assert.ErrorContains(t, err, "1 fields, want 6")
}

func TestRunRejectsArguments(t *testing.T) {
	err := run([]string{"extra"}, &bytes.Buffer{}, &bytes.Buffer{})
	assert.ErrorContains(t, err, `unexpected arguments ["extra"]`)
}
