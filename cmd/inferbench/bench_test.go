package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchfmt"
)

// TestBenchOutputParsesAsBenchstatReadsIt runs inferbench bench on the
// in-process server and reads its output with x/perf's reader, as benchstat
// and scripts/gate do.
func TestBenchOutputParsesAsBenchstatReadsIt(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "-model", "tiny", "-size", "32x32", "-backends", "cpu", "-batches", "1",
		"-workers", "1", "-pipelines", "serial,overlap", "-benchtime", "4x"}, &stdout, &stderr)
	require.NoError(t, err, "stderr: %s", stderr.String())
	r := benchfmt.NewReader(strings.NewReader(stdout.String()), "bench.txt")
	var names []string
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.Result:
			names = append(names, string(rec.Name.Full()))
			assert.Equal(t, 4, rec.Iters)
			assert.Equal(t, "tiny", rec.GetConfig("model"))
			found := false
			for _, v := range rec.Values {
				found = found || (v.Unit == "samples/s" || v.OrigUnit == "samples/s") && v.Value > 0
			}
			assert.True(t, found, "%s has no samples/s", rec.Name.Full())
		case *benchfmt.SyntaxError:
			t.Errorf("line does not parse: %v", rec)
		}
	}
	require.NoError(t, r.Err())
	assert.Len(t, names, 2)
	for _, n := range names {
		assert.True(t, strings.HasPrefix(n, "Server/backend=cpu/batch=1/workers=1/pipeline="), n)
	}
	assert.Contains(t, stderr.String(), "summary")
}

func TestBenchFlagErrorExitsTwo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"bench", "-batches", "0"}, &stdout, &stderr)
	assert.Equal(t, 2, exitCode(err, &stderr))
	assert.Contains(t, stderr.String(), `-batches "0": images per request must be at least 1`)
	assert.Empty(t, stdout.String())
}
