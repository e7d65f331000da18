//go:build cuda && linux && cgo

package cuda

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/resnet"
)

// The per-layer profile (TestProfile) is written only when -profile names a
// file:
//
//	go test -c -tags cuda -o cuda.test ./inference/cuda
//	./cuda.test -test.run '^TestProfile$' -profile profile.md \
//	    -profile-batches 256,32 -profile-precision fp16 -profile-input fp32,uint8 -profile-convs legacy
var (
	profileOut       = flag.String("profile", "", "write the per-layer GPU time of one forward pass as a markdown table to this file")
	profileBatches   = flag.String("profile-batches", "256,32", "batch sizes to profile")
	profilePrecision = flag.String("profile-precision", "fp16", "precision to profile (fp32, tf32, fp16)")
	profileInputs    = flag.String("profile-input", "fp32,uint8", "input datatypes to profile (fp32, uint8)")
	profilePasses    = flag.Int("profile-passes", 21, "passes measured per table (each step's median is reported)")
	profileSize      = flag.Int("profile-size", 250, "image height and width")
	profileConvs     = flag.String("profile-convs", "legacy", "convolutions to profile: legacy or graph (backend.Convs)")
)

// TestProfile writes the per-step device time of the forward pass (see
// worker.profileForward) for every batch size and input datatype the
// -profile flags name.
func TestProfile(t *testing.T) {
	if *profileOut == "" {
		t.Skip("-profile not set: no profile requested")
	}
	requireGPU(t)
	prec, err := backend.ParsePrecision(*profilePrecision)
	require.NoError(t, err)
	convs, err := backend.ParseConvs(*profileConvs)
	require.NoError(t, err)
	var batches []int
	for _, s := range strings.Split(*profileBatches, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		require.NoError(t, err, "-profile-batches")
		batches = append(batches, n)
	}
	var inputs []bool
	for _, s := range strings.Split(*profileInputs, ",") {
		switch strings.TrimSpace(s) {
		case "fp32":
			inputs = append(inputs, false)
		case "uint8":
			inputs = append(inputs, true)
		default:
			t.Fatalf("-profile-input %q: want fp32 or uint8", s)
		}
	}
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	maxBatch := 0
	for _, n := range batches {
		maxBatch = max(maxBatch, n)
	}
	e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: maxBatch, Height: *profileSize, Width: *profileSize,
		Precision: prec, Convs: convs, Batches: batches})
	require.NoError(t, err)
	defer e.Close()
	w := e.(*engine).workers[0]
	var profiles []*Profile
	for _, n := range batches {
		for _, u8 := range inputs {
			p, err := w.profileForward(n, u8, *profilePasses)
			require.NoError(t, err)
			profiles = append(profiles, p)
		}
	}
	f, err := os.Create(*profileOut)
	require.NoError(t, err)
	writeProfiles(f, e.Info().Config, prec, convs, *profileSize, profiles)
	require.NoError(t, f.Close())
}

// writeProfiles writes profiles as markdown: what was measured, then one table
// per profile.
func writeProfiles(out io.Writer, config []backend.KV, prec backend.Precision, convs backend.Convs, size int, profiles []*Profile) {
	fmt.Fprintf(out, "# Per-layer GPU time of the ResNet-18 forward pass\n\n")
	for _, kv := range config {
		fmt.Fprintf(out, "- %s: %s\n", kv.Key, kv.Value)
	}
	fmt.Fprintf(out, "- precision: %s, convolutions: %s, input %dx%d, seeded ResNet-18\n", prec, convs, size, size)
	fmt.Fprintf(out, "- measured: %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "Each pass runs as library calls (no CUDA graph) on one stream, held behind a gate until the host has\n"+
		"enqueued all of it, with a CUDA event recorded after every step. A step's time is the device time between\n"+
		"the event before it and the event after it (cuEventElapsedTime, the GPU's clock), median over the passes;\n"+
		"share is of the pass's total (first to last event, median). Events between steps can keep a kernel from\n"+
		"starting before its predecessor ends, so the total is at or above the pass's time without them.\n\n")
	for _, p := range profiles {
		in := "float32"
		if p.Uint8 {
			in = "uint8"
		}
		fmt.Fprintf(out, "## batch %d, %s input\n\n", p.Batch, in)
		fmt.Fprintf(out, "Total %.1f us per pass (%d passes, median), %.2f us per image.\n\n",
			us(p.Total), p.Passes, us(p.Total)/float64(p.Batch))
		fmt.Fprintf(out, "| step | shape per image | call / kernel | GPU time per batch (us) | share |\n|---|---|---|---:|---:|\n")
		for _, s := range p.Steps {
			fmt.Fprintf(out, "| %s | %s | %s | %.1f | %.1f %% |\n", s.Name, s.Shape, s.Call, us(s.Time), 100*float64(s.Time)/float64(p.Total))
		}
		fmt.Fprintln(out)
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// TestProfileSteps checks that a profile has every step of the network once,
// in order, with times that add up to the pass.
func TestProfileSteps(t *testing.T) {
	requireGPU(t)
	m, err := resnet.New(resnet.ResNet18(), 1)
	require.NoError(t, err)
	for _, prec := range precisions {
		t.Run(prec.String(), func(t *testing.T) {
			e, err := New().Open(m, backend.Options{Workers: 1, Slots: 1, MaxBatch: 4, Height: 64, Width: 64, Precision: prec})
			require.NoError(t, err)
			defer e.Close()
			w := e.(*engine).workers[0]
			for _, u8 := range []bool{false, true} {
				p, err := w.profileForward(4, u8, 3)
				require.NoError(t, err)
				var names []string
				var sum time.Duration
				for _, s := range p.Steps {
					names = append(names, s.Name)
					sum += s.Time
					assert.GreaterOrEqual(t, s.Time, time.Duration(0), s.Name)
				}
				steps := 1 + 1 + 1 + 8*2 + 3 + 1 + 1 // input, stem, pool, blocks, shortcuts, avg pool, classifier
				assert.Len(t, names, steps, "steps: %v", names)
				assert.Equal(t, []string{"input", "stem", "max-pool", "block 0 conv1"}, names[:4])
				assert.Equal(t, []string{"average pool", "classifier"}, names[len(names)-2:])
				// Medians of steps need not add up to the median pass exactly.
				assert.InDelta(t, float64(p.Total), float64(sum), 0.25*float64(p.Total), "sum of steps vs pass")
				assert.Positive(t, p.Total)
			}
		})
	}
}
