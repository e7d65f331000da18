package main

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

func TestBadFlagsNameTheFlagAndTheRule(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "-workers", "0"}, "-workers 0: must be at least 1"},
		{[]string{"serve", "-max-batch", "-3"}, "-max-batch -3: must be at least 1"},
		{[]string{"serve", "-size", "250"}, `-size "250": want HxW`},
		{[]string{"serve", "-size", "16x16"}, `-size "16x16": resnet: input 16x16, want at least 32x32`},
		{[]string{"serve", "-pipeline", "parallel"}, `-pipeline "parallel": want serial or overlap`},
		{[]string{"serve", "-precision", "bf16"}, `-precision "bf16": want fp32, tf32 or fp16`},
		{[]string{"serve", "-convs", "fast"}, `-convs "fast": want graph or legacy`},
		{[]string{"serve", "-grpc-server", "h3"}, `-grpc-server "h3": want h2grpc or grpc-go`},
		{[]string{"serve", "-queue-policy", "drop"}, `-queue-policy "drop": want block or reject`},
		{[]string{"serve", "-devices", "0,x"}, `-devices "0,x"`},
		{[]string{"serve", "-batches", "0"}, `-batches "0": want comma-separated integers of at least 1`},
		{[]string{"serve", "-batches", "1,512"}, `-batches: 512 is larger than -max-batch 256`},
		{[]string{"serve", "-max-batch", "8", "-preferred-batches", "16"}, `-preferred-batches: 16 is larger than -max-batch 8`},
		{[]string{"serve", "-max-batch", "100000"}, "-max-batch 100000: must be at most 4096"},
		{[]string{"serve", "-workers", "5000"}, "-workers 5000: must be at most 256"},
		{[]string{"serve", "-slots", "17"}, "-slots 17: must be at most 16"},
		{[]string{"serve", "-max-queue", "99999999"}, "-max-queue 99999999: must be at most 1048576"},
		{[]string{"serve", "-uint8-std", "0,1,1"}, `-uint8-std "0,1,1": a standard deviation of 0 divides by zero`},
		{[]string{"serve", "-uint8-mean", "NaN,0,0"}, `-uint8-mean "NaN,0,0": want comma-separated numbers`},
		{[]string{"serve", "-grace", "-1s"}, "-grace -1s: must not be negative"},
		{[]string{"serve", "-model", "resnet50"}, `-model "resnet50": want resnet18 or tiny`},
		{[]string{"serve", "-uint8-mean", "a,b,c"}, `-uint8-mean "a,b,c"`},
		{[]string{"serve", "-http-addr", "", "-grpc-addr", ""}, "nothing to serve"},
		{[]string{"serve", "-log", "xml"}, `-log "xml"`},
		{[]string{"serve", "-gc-percent", "-2"}, "-gc-percent -2: must be -1 (off) or at least 0"},
		{[]string{"serve", "-shm-max-regions", "0"}, "-shm-max-regions 0: must be at least 1 (shared memory is off unless -shm)"},
		{[]string{"serve", "-shm-key-prefix", "a/b"}, `-shm-key-prefix "a/b": want the start of a shared-memory object's name`},
		{[]string{"serve", "-shm-header", "novalue"}, `-shm-header: required header "novalue": want name=value`},
		{[]string{"serve", "-shm-max-bytes", "0"}, "-shm-max-bytes 0: must be at least 1"},
		{[]string{"serve", "-health-conns", "-1"}, "-health-conns -1: must be at least 0"},
		{[]string{"serve", "-grpc-window", "1000"}, "-grpc-window 1000: want 64 KiB (65536) to 256 MiB (268435456)"},
		{[]string{"serve", "-backend", "gpu"}, `-backend "gpu": want cpu, cuda or nop`},
		{[]string{"serve", "-idle-poll", "20ms"}, "-idle-poll 20ms: want 0 to 10ms"},
		{[]string{"serve", "-uint8-mean", "0.5,0.5"}, "-uint8-mean: 2 values, want one for each of the model's 3 channels"},
		{[]string{"serve", "-http-addr", "a:b:1"}, `-http-addr "a:b:1": address a:b:1: too many colons`},
		{[]string{"serve", "-grpc-addr", ":99999"}, `-grpc-addr ":99999": port "99999"`},
		{[]string{"serve", "-metrics-addr", "8002"}, `-metrics-addr "8002": address 8002: missing port`},
		{[]string{"serve", "-max-id-bytes", "0"}, "-max-id-bytes 0: must be at least 1"},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "-no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{nil, "usage: inferbench"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		assert.Equal(t, 2, exitCode(err, &errOut), "%v: exit status", tc.args)
		assert.Contains(t, errOut.String(), tc.msg, "%v", tc.args)
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"serve", "-h"}, {"help"}} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		assert.Equal(t, 0, exitCode(err, &errOut), "%v", args)
		assert.Contains(t, out.String()+errOut.String(), "serve", "%v", args)
	}
}

func TestFlagsReachTheConfig(t *testing.T) {
	var errOut bytes.Buffer
	f, err := parseServe([]string{
		"-backend", "nop", "-workers", "3", "-pipeline", "overlap", "-slots", "4", "-precision", "fp16", "-graphs",
		"-devices", "0,1", "-pinned-input=false", "-max-batch", "64", "-batches", "1,32", "-max-queue", "9",
		"-queue-policy", "reject", "-timeout", "2s", "-reject-non-finite", "-max-queue-delay", "3ms", "-idle-poll", "200us",
		"-preferred-batches", "16,32", "-checkpoint", "w.pth", "-model", "tiny", "-seed", "7", "-size", "64x48", "-trace", "t.json",
	}, &errOut)
	require.NoError(t, err, errOut.String())
	cfg, err := f.config()
	require.NoError(t, err)
	assert.Equal(t, "nop", cfg.BackendName)
	assert.Equal(t, 3, cfg.Workers)
	assert.Equal(t, inference.Overlap, cfg.Pipeline)
	assert.Equal(t, 4, cfg.Slots)
	assert.Equal(t, inference.FP16, cfg.Precision)
	assert.True(t, cfg.Graphs)
	assert.Equal(t, []int{0, 1}, cfg.Devices)
	assert.False(t, cfg.PinnedInput)
	assert.Equal(t, 64, cfg.MaxBatch)
	assert.Equal(t, []int{1, 32}, cfg.Batches)
	assert.Equal(t, 9, cfg.MaxQueue)
	assert.Equal(t, inference.Reject, cfg.QueuePolicy)
	assert.Equal(t, 2*time.Second, cfg.Timeout)
	assert.True(t, cfg.RejectNonFinite)
	assert.Equal(t, 3*time.Millisecond, cfg.MaxQueueDelay)
	assert.Equal(t, 200*time.Microsecond, cfg.IdlePoll)
	assert.Equal(t, []int{16, 32}, cfg.PreferredBatches)
	assert.Equal(t, "w.pth", cfg.Checkpoint)
	assert.Equal(t, uint64(7), cfg.Seed)
	assert.Equal(t, resnet.Tiny(), cfg.Arch)
	assert.Equal(t, 64, cfg.Height)
	assert.Equal(t, 48, cfg.Width)
	assert.NotNil(t, cfg.Trace)
}

func TestSharedMemoryFlagsReachTheFrontDoor(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want protocol.SharedMemoryLimits
	}{
		{nil, protocol.SharedMemoryLimits{KeyPrefix: "inferbench-", MaxRegions: protocol.DefaultMaxRegions, MaxBytes: protocol.DefaultSharedMemoryBytes}},
		{[]string{"-shm", "-shm-max-regions", "3", "-shm-max-bytes", "4096"}, protocol.SharedMemoryLimits{Enabled: true, KeyPrefix: "inferbench-", MaxRegions: 3, MaxBytes: 4096}},
		{[]string{"-shm", "-shm-key-prefix", "", "-shm-header", "Admin-Key=s3cret"},
			protocol.SharedMemoryLimits{Enabled: true, Header: "admin-key", HeaderValue: "s3cret", MaxRegions: protocol.DefaultMaxRegions, MaxBytes: protocol.DefaultSharedMemoryBytes}},
	} {
		var errOut bytes.Buffer
		f, err := parseServe(tc.args, &errOut)
		require.NoError(t, err, errOut.String())
		assert.Equal(t, tc.want, f.sharedMemory(), "%v", tc.args)
	}
}

// TestAddressInUseStopsBeforeTheModelLoads: an address that cannot be
// listened on is found before the model loads (no warm-up line), naming its
// flag.
func TestAddressInUseStopsBeforeTheModelLoads(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"serve", "-http-addr", ln.Addr().String(), "-grpc-addr", "", "-metrics-addr", ""}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `-http-addr "`+ln.Addr().String()+`"`)
	assert.NotContains(t, errOut.String(), "warm-up", "the model was loaded first")
}
