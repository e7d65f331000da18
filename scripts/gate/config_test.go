package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckConfig(t *testing.T) {
	const (
		server = "BenchmarkServer/batch=1 \t1\t100 ns/op\n"
		other  = "BenchmarkOther \t1\t100 ns/op\n"
	)
	tests := []struct {
		name       string
		flags      []string
		base, head string
		wantErr    []string // in the error; none: no error
		wantNote   string   // the notes after "note: only DIR/"; "": no notes
	}{
		{"same lines", nil,
			"model: tiny\nsize: 64x64\n" + server,
			"model: tiny\nsize: 64x64\n" + server, nil, ""},
		{"commit, date and matrix may differ", nil,
			"commit: aaa\ndate: 2026-11-22T01:00:00Z\nmatrix: seed\nmodel: tiny\n" + server,
			"commit: bbb\ndate: 2026-11-23T01:00:00Z\nmatrix: gpu-full\nmodel: tiny\n" + server, nil, ""},
		{"model and size differ", nil,
			"model: resnet18\nsize: 250x250\n" + server + server,
			"model: tiny\nsize: 64x64\n" + server, []string{
				"were measured with different settings",
				"\n  model: resnet18 in base, tiny in head (1 benchmark)",
				"\n  size: 250x250 in base, 64x64 in head (1 benchmark)",
				"not compared: commit, date, matrix; -ignore adds keys)"}, ""},
		{"-ignore skips a line", []string{"-ignore", "cudnn-algo-cache, size"},
			"cudnn-algo-cache: path=a hits=0 misses=20\nsize: 250x250\n" + server,
			"cudnn-algo-cache: path=b hits=20 misses=0\nsize: 64x64\n" + server, nil, ""},
		{"a file that mixes settings", nil,
			"model: tiny\n" + server + "model: resnet18\n" + server,
			"model: tiny\n" + server, []string{"\n  model: tiny and resnet18 in base, tiny in head (1 benchmark)"}, ""},
		{"every benchmark with the difference is counted", nil,
			"gpu: NVIDIA H200\n" + server + other,
			"gpu: NVIDIA H100\n" + server + other, []string{"\n  gpu: NVIDIA H200 in base, NVIDIA H100 in head (2 benchmarks)"}, ""},
		{"a line in one file only is a note", nil,
			"backend: cpu\n" + server,
			"backend: cpu\nmodel: tiny\n" + server, nil, "head.txt has a model: line (tiny): not compared\n"},
		{"a line printed after some results is no difference", nil,
			"backend: cpu\n" + server + "cpu-gemm-kernel: avx512\n" + server,
			"backend: cpu\ncpu-gemm-kernel: avx512\n" + server, nil, ""},
		{"benchmarks in one file only are not compared", nil,
			"model: resnet18\n" + other + "model: tiny\n" + server,
			"model: tiny\n" + server, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			base, head := filepath.Join(dir, "base.txt"), filepath.Join(dir, "head.txt")
			require.NoError(t, os.WriteFile(base, []byte(tt.base), 0o644))
			require.NoError(t, os.WriteFile(head, []byte(tt.head), 0o644))
			cfg, err := parseFlags(append(tt.flags, base, head), &bytes.Buffer{})
			require.NoError(t, err)
			bs, err := readFile(base, cfg)
			require.NoError(t, err)
			hs, err := readFile(head, cfg)
			require.NoError(t, err)

			var notes bytes.Buffer
			err = checkConfig(&notes, bs, hs)
			if len(tt.wantErr) == 0 {
				assert.NoError(t, err)
			} else {
				require.Error(t, err)
				for _, want := range tt.wantErr {
					assert.Contains(t, err.Error(), want)
				}
			}
			if tt.wantNote == "" {
				assert.Empty(t, notes.String())
			} else {
				assert.Equal(t, "note: only "+filepath.Join(dir, tt.wantNote), notes.String())
			}
		})
	}
}
