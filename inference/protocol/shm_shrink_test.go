//go:build linux

package protocol_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/client"
)

// TestShrunkRegionFailsTheRequestNotTheServer shrinks a registered region's
// object under the server, first the input's and then the output's: the
// server's next access to the lost pages faults (SIGBUS). The request must
// fail with an error that says so, and the server must go on serving.
func TestShrunkRegionFailsTheRequestNotTheServer(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{})
	ctx := context.Background()
	for name, c := range f.shmClients(t) {
		t.Run(name, func(t *testing.T) {
			in := newObject(t, dir, "/in-"+name, imageBytes)
			out := newObject(t, dir, "/out-"+name, 4*classes)
			require.NoError(t, c.RegisterSystemSharedMemory(ctx, "in", "/in-"+name, 0, imageBytes))
			require.NoError(t, c.RegisterSystemSharedMemory(ctx, "out", "/out-"+name, 0, 4*classes))
			defer func() { require.NoError(t, c.UnregisterSystemSharedMemory(ctx, "")) }()
			images := randomImages(3, 1)
			in.writeFloats(0, images)
			want := bits(f.inProcess(t, images))

			require.NoError(t, in.f.Truncate(0))
			_, err := c.Infer(ctx, shmRequest(1, 0, 0))
			require.Error(t, err, "input region shrunk")
			t.Logf("input shrunk: %v", err)
			assert.Contains(t, err.Error(), "fault")
			require.NoError(t, in.f.Truncate(imageBytes))
			in.writeFloats(0, images)

			require.NoError(t, out.f.Truncate(0))
			_, err = c.Infer(ctx, shmRequest(1, 0, 0))
			require.Error(t, err, "output region shrunk")
			t.Logf("output shrunk: %v", err)
			assert.Contains(t, err.Error(), "fault")
			require.NoError(t, out.f.Truncate(4*classes))

			// FP16 input is widened by the front door, in the handler.
			half := newObject(t, dir, "/half-"+name, imageBytes/2)
			require.NoError(t, c.RegisterSystemSharedMemory(ctx, "half", "/half-"+name, 0, imageBytes/2))
			require.NoError(t, half.f.Truncate(0))
			req := shmRequest(1, 0, 0)
			req.Inputs[0].Datatype = "FP16"
			req.Inputs[0].Region = &client.Region{Name: "half", ByteSize: imageBytes / 2}
			_, err = c.Infer(ctx, req)
			require.Error(t, err, "FP16 input region shrunk")
			t.Logf("FP16 input shrunk: %v", err)
			assert.Contains(t, err.Error(), "fault")

			_, err = c.Infer(ctx, shmRequest(1, 0, 0))
			require.NoError(t, err, "the server serves on")
			assert.Equal(t, want, bits(out.readFloats(0, classes)))
		})
	}
}
