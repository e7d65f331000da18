package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/want.txt")

// The two CSV files were written by perf_analyzer 2.50.0 against
// inferbench serve (tiny model, CPU back-end), the second with --shared-memory system.
func TestGolden(t *testing.T) {
	var out, errs bytes.Buffer
	err := run([]string{"-config", "gpu=none", "-config", "client=perf_analyzer 2.50.0",
		"testdata/pa-grpc-none-b1-c1.csv", "testdata/pa-http-system-b2-c2.csv"}, &out, &errs)
	require.NoError(t, err, errs.String())
	want := filepath.Join("testdata", "want.txt")
	if *update {
		require.NoError(t, os.WriteFile(want, out.Bytes(), 0o644))
	}
	w, err := os.ReadFile(want)
	require.NoError(t, err)
	assert.Equal(t, string(w), out.String())
}

func TestErrorsNameTheFileAndTheRule(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no files", nil, "no CSV files given"},
		{"bad name", []string{write("results.csv", "")}, "want a name pa-<grpc|http>-<none|system>-b<B>-c<C>.csv"},
		{"header only", []string{write("pa-grpc-none-b1-c1.csv", "Concurrency,Inferences/Second\n")}, "no measurements"},
		{"no concurrency", []string{write("pa-grpc-none-b1-c2.csv", "Inferences/Second\n5\n")}, "no Concurrency column"},
		{"not a number", []string{write("pa-http-none-b1-c1.csv", "Concurrency,Inferences/Second\n1,fast\n")}, `column "Inferences/Second"`},
		{"bad config", []string{"-config", "gpu", "x.csv"}, "want key=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			err := run(tc.args, &out, &errs)
			require.Error(t, err)
			assert.Contains(t, err.Error()+errs.String(), tc.want)
		})
	}
}
