//go:build linux

package client_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference/client"
)

// shmKey is a key no other test process uses.
func shmKey(t *testing.T, name string) string {
	return fmt.Sprintf("/inferbench-client-test-%d-%s", os.Getpid(), name)
}

func TestSharedMemoryObjectCarriesTensorsBothWays(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	s := serve(t)
	const batch, classes = 2, 5
	image := 3 * side * side
	in, err := client.CreateSharedMemory(shmKey(t, "in"), 4*batch*image)
	require.NoError(t, err)
	defer in.Close()
	out, err := client.CreateSharedMemory(shmKey(t, "out"), 2*4*batch*classes)
	require.NoError(t, err)
	defer out.Close()
	values := make([]float32, batch*image)
	for i := range values {
		values[i] = float32(i%97) / 7
	}
	require.NoError(t, in.PutFloat32s(0, values))

	for slot, tc := range []struct {
		name string
		c    interface {
			client.Client
			client.SharedMemory
		}
	}{{"http", s.http}, {"grpc", s.grpc}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			require.NoError(t, tc.c.RegisterSystemSharedMemory(ctx, "in-"+tc.name, in.Key(), 0, uint64(len(in.Bytes()))))
			require.NoError(t, tc.c.RegisterSystemSharedMemory(ctx, "out-"+tc.name, out.Key(), 0, uint64(len(out.Bytes()))))
			defer tc.c.UnregisterSystemSharedMemory(ctx, "")
			outBytes := int64(4 * batch * classes)
			resp, err := tc.c.Infer(ctx, &client.InferRequest{Model: "resnet18",
				Inputs: []client.Tensor{{Name: "input", Datatype: "FP32", Shape: []int64{batch, 3, side, side},
					Region: &client.Region{Name: "in-" + tc.name, ByteSize: int64(len(in.Bytes()))}}},
				OutputRegions: map[string]client.Region{"logits": {Name: "out-" + tc.name, Offset: int64(slot) * outBytes, ByteSize: outBytes}}})
			require.NoError(t, err)
			o, err := resp.Output("logits")
			require.NoError(t, err)
			require.NotNil(t, o.Region, "the logits were left in the region")
			// nop's logits are each image's first values.
			got := out.Bytes()[int64(slot)*outBytes:]
			for img := range batch {
				for k := range classes {
					v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*(img*classes+k):]))
					assert.Equal(t, values[img*image+k], v, "image %d class %d", img, k)
				}
			}
		})
	}
}

func TestSharedMemoryObjectErrors(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	key := shmKey(t, "errors")
	o, err := client.CreateSharedMemory(key, 64)
	require.NoError(t, err)
	path := filepath.Join("/dev/shm", key[1:])
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, int64(64), st.Size())

	_, err = client.CreateSharedMemory(key, 64)
	assert.ErrorContains(t, err, "file exists", "the object exists")
	assert.ErrorContains(t, o.PutFloat32s(60, []float32{1, 2}), "2 FP32 values at offset 60 do not fit")
	assert.ErrorContains(t, o.PutFloat32s(-4, []float32{1}), "at offset -4 do not fit")
	require.NoError(t, o.PutFloat32s(60, []float32{1}))

	require.NoError(t, o.Close())
	_, err = os.Stat(path)
	assert.True(t, os.IsNotExist(err), "Close removes the object: %v", err)
	assert.NoError(t, o.Close(), "a second Close does nothing")
	assert.Nil(t, o.Bytes())

	for _, tc := range []struct {
		name, key string
		size      int
		want      string
	}{
		{"no slash", "name", 8, `key "name": want "/name"`},
		{"two slashes", "/a/b", 8, `key "/a/b": want "/name"`},
		{"empty", "/", 8, `key "/": want "/name"`},
		{"dot dot", "/..", 8, `key "/..": want "/name"`},
		{"zero size", key + "-0", 0, "size 0, want at least 1 byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.CreateSharedMemory(tc.key, tc.size)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
