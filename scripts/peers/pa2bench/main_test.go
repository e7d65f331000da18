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
		{"bad name", []string{write("results.csv", "")}, "want a name pa-<grpc|http>-<none|system|cuda>-b<B>-c<C>.csv"},
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

// TestCudaSharedMemory reads a file of perf_analyzer --shared-memory cuda
// (an H200 run against inferbench serve -backend cuda): its transport is
// grpc-cudashm.
func TestCudaSharedMemory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pa-grpc-cuda-b256-c1.csv")
	require.NoError(t, os.WriteFile(p, []byte("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"+
		"Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"+
		"1,52546.2,8,632,75,114,4019,4,2,4826,4938,4996,5838\n"), 0o644))
	var out, errs bytes.Buffer
	require.NoError(t, run([]string{p}, &out, &errs), errs.String())
	assert.Contains(t, out.String(), "BenchmarkServer/batch=256/servers=1/load=closed/concurrency=1/transport=grpc-cudashm/client=perf_analyzer")
	assert.Contains(t, out.String(), "52546.2 samples/s")
	assert.Contains(t, out.String(), "114000 h2d-ns")
}
