package suite

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/loadgen"
)

var updateNames = flag.Bool("update-names", false, "rewrite testdata/names from the matrices")

// The golden files in testdata/names were first written by the nested loops
// the matrices replaced: the names benchstat and the gate compare across
// commits must stay byte for byte what they were.
var nameCases = []struct {
	name, bench string
	gpu         bool
	args        []string
}{
	{"default", "Server", false, nil},
	{"smoke", ".", false, []string{"-model", "tiny", "-size", "64x64", "-batches", "1,4"}},
	{"cuda-matrix", "Server", true, []string{"-backends", "cpu,cuda,nop", "-workers", "1,4", "-pipelines", "serial,overlap", "-graphs", "off,on", "-devices", "1,2"}},
	{"cuda-precisions", "Server", true, []string{"-backends", "cuda", "-precisions", "fp16,fp32", "-batches", "2"}},
	{"named-dims", "Server", false, []string{"-input", "fp32,uint8", "-batching", "off,on", "-loads", "burst,closed,open", "-concurrency", "1,4", "-rate", "100,250.5", "-transports", "inproc,grpc,http-shm", "-servers", "1,2", "-batches", "1"}},
	{"closed-default", "Server", false, []string{"-loads", "closed,open", "-workers", "1,3", "-rate", "1000:3000:1000", "-transports", "http,inproc"}},
	{"target", "Server|Scenario|Capacity", false, []string{"-target", "grpc://127.0.0.1:1,grpc://127.0.0.1:2", "-input", "uint8,fp32", "-loads", "closed,open", "-batches", "1,8", "-rate", "10"}},
	{"target-default", "Server", false, []string{"-target", "http://127.0.0.1:1", "-batching", "on"}},
	{"scenarios", "Scenario", false, []string{"-scenarios", "SingleStream,MultiStream,Server,Offline", "-rate", "50,100", "-input", "uint8", "-batches", "4"}},
	{"capacity", "Capacity", false, []string{"-backends", "cpu,nop", "-batches", "1,16", "-workers", "2", "-precisions", "fp32", "-graphs", "on,off"}},
	{"capacity-default", "Capacity", false, nil},
	{"all", "ServerScenarioCapacity", false, []string{"-batching", "on", "-input", "fp32"}},
}

// matrixNames lists every sub-benchmark the suite runs under c, as testing
// names them without the Benchmark prefix.
func matrixNames(c *config) []string {
	var names []string
	for _, bench := range []string{"Server", "Scenario", "ServerOverhead", "Capacity"} {
		ps, _ := c.matrix(bench)
		for _, p := range ps {
			names = append(names, bench+"/"+p.name)
		}
	}
	return names
}

func TestNamesMatchTheGoldenFiles(t *testing.T) {
	for _, tc := range nameCases {
		t.Run(tc.name, func(t *testing.T) {
			gpu := noGPU
			if tc.gpu {
				gpu = func() error { return nil }
			}
			c, err := parseSuiteFlags(t, gpu, tc.bench, "1x", tc.args...)
			require.NoError(t, err)
			got := "# bench: " + tc.bench + "\n# args: " + strings.Join(tc.args, " ") + "\n" + strings.Join(matrixNames(c), "\n") + "\n"
			path := filepath.Join("testdata", "names", tc.name+".txt")
			if *updateNames {
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(want), got)
		})
	}
}

func TestScenarioPointsCarryTheirLoad(t *testing.T) {
	c, err := parseSuiteFlags(t, noGPU, "Scenario", "1x", "-scenarios", "MultiStream,Server", "-rate", "20", "-batches", "4", "-workers", "1", "-pipelines", "serial")
	require.NoError(t, err)
	ps, skip := c.matrix("Scenario")
	require.Empty(t, skip)
	require.Len(t, ps, 2)
	assert.Equal(t, loadgen.MultiStream, ps[0].scenario)
	assert.Equal(t, 8, ps[0].batch, "MultiStream's queries are 8 images, whatever -batches says")
	assert.Equal(t, loadgen.Server, ps[1].scenario)
	assert.Equal(t, 20.0, ps[1].rate)
	assert.Equal(t, 1, ps[1].batch)
}

func TestDimensionsNameTheirFlags(t *testing.T) {
	var f settings
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	f.register(fs)
	for _, d := range Dimensions() {
		assert.NotNil(t, fs.Lookup(d.Flag), "dimension %s: no flag -%s", d.Key, d.Flag)
		assert.NotEmpty(t, d.Doc, d.Key)
	}
}

// TestBatchingSizes checks the merged batch's limit and the sizes prepared
// for it: the rule's, -batching-max's and -batching-step's, and never below
// the request's batch or between whole requests.
func TestBatchingSizes(t *testing.T) {
	for _, tc := range []struct {
		batch, limit, step int
		max                int
		sizes              []int
	}{
		{1, 0, 0, 64, []int{1, 2, 4, 8, 16, 32, 64}},
		{32, 0, 0, 256, []int{32, 64, 128, 256}},
		{256, 0, 0, 1024, []int{256, 512, 1024}},
		{1, 128, 0, 128, []int{1, 2, 4, 8, 16, 32, 64, 128}},
		{1, 96, 0, 96, []int{1, 2, 4, 8, 16, 32, 64, 96}},
		{3, 0, 0, 64, []int{3, 6, 12, 24, 48, 64}},
		{256, 64, 0, 256, []int{256}},
		{1, 96, 8, 96, []int{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96}},
		{1, 90, 16, 90, []int{1, 2, 4, 8, 16, 32, 48, 64, 80, 90}},
		{3, 0, 8, 64, []int{3, 6, 12, 24, 48, 64}},
		{2, 16, 3, 16, []int{2, 4, 6, 8, 12, 16}},
	} {
		m, sizes := batchingSizes(tc.batch, tc.limit, tc.step)
		assert.Equal(t, tc.max, m, "batch %d, limit %d: MaxBatch", tc.batch, tc.limit)
		assert.Equal(t, tc.sizes, sizes, "batch %d, limit %d, step %d: prepared sizes", tc.batch, tc.limit, tc.step)
	}
}
