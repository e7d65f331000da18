package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/resnet"
)

// The end-to-end tests build the real command and drive it, on loopback
// ports it picks itself, with clients nobody here wrote: curl and grpcurl
// (github.com/fullstorydev/grpcurl, a tool of this module), and with our own
// Go client. They need the go command (to build both) and curl; without
// curl they skip, unless INFERBENCH_E2E_REQUIRE=1 (CI sets it) makes that a
// failure.

var bins struct {
	once             sync.Once
	dir              string
	inferbench, gurl string
	err              error
}

// binaries builds inferbench and grpcurl once per test binary.
func binaries(t *testing.T) (inferbench, grpcurl string) {
	t.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "inferbench-e2e")
		if bins.err != nil {
			return
		}
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		bins.inferbench = filepath.Join(bins.dir, "inferbench")
		bins.gurl = filepath.Join(bins.dir, "grpcurl")
		for _, b := range [][]string{{bins.inferbench, "."}, {bins.gurl, "github.com/fullstorydev/grpcurl/cmd/grpcurl"}} {
			out, err := exec.Command(goBin, "build", "-o", b[0], b[1]).CombinedOutput()
			if err != nil {
				bins.err = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	require.NoError(t, bins.err)
	return bins.inferbench, bins.gurl
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

func needCurl(t *testing.T) string {
	path, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("INFERBENCH_E2E_REQUIRE") == "1" {
			t.Fatalf("curl is required (INFERBENCH_E2E_REQUIRE=1): %v", err)
		}
		t.Skipf("curl not found (%v): install it to run the end-to-end test", err)
	}
	return path
}

// server is a running inferbench serve process.
type server struct {
	cmd                 *exec.Cmd
	http, grpc, metrics string // addresses
	log                 *bytes.Buffer
	logMu               *sync.Mutex
	exited              chan error
}

// startServer runs inferbench serve with args on loopback ports and waits
// until it listens.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	exe, _ := binaries(t)
	args = append([]string{"serve", "-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-log", "json"}, args...)
	cmd := exec.Command(exe, args...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &server{cmd: cmd, log: &bytes.Buffer{}, logMu: &sync.Mutex{}, exited: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			s.logMu.Lock()
			s.log.Write(append(line, '\n'))
			s.logMu.Unlock()
			var e struct{ Msg, Protocol, Addr string }
			if json.Unmarshal(line, &e) != nil {
				continue
			}
			switch {
			case e.Msg == "listening" && e.Protocol == "http":
				s.http = e.Addr
			case e.Msg == "listening" && e.Protocol == "grpc":
				s.grpc = e.Addr
			case e.Msg == "listening" && e.Protocol == "metrics":
				s.metrics = e.Addr
			case e.Msg == "serving":
				close(ready)
			}
		}
		// Wait closes the pipe: only once every line is read, or the last
		// ones (written as the process exits) could be lost.
		_, _ = io.Copy(io.Discard, stderr) // past a line the scanner refused
		s.exited <- cmd.Wait()
	}()
	select {
	case <-ready:
	case err := <-s.exited:
		t.Fatalf("inferbench serve exited before serving: %v\n%s", err, s.logText())
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("inferbench serve did not start in 60 s\n%s", s.logText())
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.exited
	})
	return s
}

func (s *server) logText() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

// stop sends SIGTERM and returns the exit error and how long it took.
func (s *server) stop(t *testing.T) (error, time.Duration) {
	start := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-s.exited:
		s.exited <- err // for the cleanup
		return err, time.Since(start)
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit 60 s after SIGTERM\n%s", s.logText())
	}
	return nil, 0
}

func runTool(t *testing.T, name string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s %v: %s", filepath.Base(name), args, stderr.String())
	return out
}

func bitsOf(v []float32) []uint32 {
	b := make([]uint32, len(v))
	for i, f := range v {
		b[i] = math.Float32bits(f)
	}
	return b
}

// parseFloats reads JSON numbers (or protojson's) as float32, exactly.
func parseFloats(t *testing.T, raw []json.RawMessage) []float32 {
	out := make([]float32, len(raw))
	for i, r := range raw {
		f, err := strconv.ParseFloat(strings.Trim(string(r), `"`), 32)
		require.NoError(t, err)
		out[i] = float32(f)
	}
	return out
}

// inProcess returns n random images (from seed) of side x side and the
// logits an in-process server of the seeded tiny model (model seed) gives
// them: what every transport must answer, bit for bit.
func inProcess(t *testing.T, model, seed uint64, n, side int) (images, logits []float32) {
	t.Helper()
	m, err := resnet.New(resnet.Tiny(), model)
	require.NoError(t, err)
	ref, err := inference.New(inference.Config{Options: inference.Options{Height: side, Width: side, MaxBatch: 4}, Model: m})
	require.NoError(t, err)
	defer ref.Close()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	images = make([]float32, n*3*side*side)
	for i := range images {
		images[i] = float32(rng.NormFloat64())
	}
	resp, err := ref.Infer(context.Background(), inference.Tensor{Shape: []int{n, 3, side, side}, Data: images})
	require.NoError(t, err)
	return images, resp.Logits.Data
}

func TestServeAnswersRealClientsWithInProcessLogits(t *testing.T) {
	curl := needCurl(t)
	_, grpcurl := binaries(t)
	const side, n = 32, 2
	s := startServer(t, "-model", "tiny", "-size", fmt.Sprintf("%dx%d", side, side), "-max-batch", "4", "-seed", "5")

	images, logits := inProcess(t, 5, 11, n, side)
	want := bitsOf(logits)
	shape := []int64{n, 3, side, side}
	dir := t.TempDir()

	t.Run("curl JSON", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"id": "curl-1", "inputs": []map[string]any{{"name": "input", "datatype": "FP32", "shape": shape, "data": images}}})
		out := runTool(t, curl, body, "-sS", "--fail-with-body", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@-",
			"http://"+s.http+"/v2/models/tiny/infer")
		var r struct {
			ID      string `json:"id"`
			Outputs []struct {
				Shape []int64           `json:"shape"`
				Data  []json.RawMessage `json:"data"`
			} `json:"outputs"`
		}
		require.NoError(t, json.Unmarshal(out, &r), "%s", out)
		assert.Equal(t, "curl-1", r.ID)
		require.Len(t, r.Outputs, 1)
		assert.Equal(t, want, bitsOf(parseFloats(t, r.Outputs[0].Data)))
	})

	t.Run("curl binary", func(t *testing.T) {
		head, _ := json.Marshal(map[string]any{
			"inputs":     []map[string]any{{"name": "input", "datatype": "FP32", "shape": shape, "parameters": map[string]any{"binary_data_size": 4 * len(images)}}},
			"parameters": map[string]any{"binary_data_output": true},
		})
		body := append([]byte{}, head...)
		for _, v := range images {
			body = binary.LittleEndian.AppendUint32(body, math.Float32bits(v))
		}
		hdrs := filepath.Join(dir, "headers")
		out := runTool(t, curl, body, "-sS", "--fail-with-body", "-X", "POST", "-D", hdrs,
			"-H", "Content-Type: application/octet-stream", "-H", "Inference-Header-Content-Length: "+strconv.Itoa(len(head)),
			"--data-binary", "@-", "http://"+s.http+"/v2/models/tiny/infer")
		h, err := os.ReadFile(hdrs)
		require.NoError(t, err)
		hl := -1
		for _, line := range strings.Split(string(h), "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Inference-Header-Content-Length") {
				hl, err = strconv.Atoi(strings.TrimSpace(v))
				require.NoError(t, err)
			}
		}
		require.Positive(t, hl, "headers: %s", h)
		require.Len(t, out, hl+4*len(want))
		got := make([]float32, len(want))
		for i := range got {
			got[i] = math.Float32frombits(binary.LittleEndian.Uint32(out[hl+4*i:]))
		}
		assert.Equal(t, want, bitsOf(got))
	})

	t.Run("grpcurl", func(t *testing.T) {
		list := string(runTool(t, grpcurl, nil, "-plaintext", s.grpc, "list"))
		assert.Contains(t, list, "inference.GRPCInferenceService")
		assert.Contains(t, list, "grpc.health.v1.Health")
		health := string(runTool(t, grpcurl, nil, "-plaintext", s.grpc, "grpc.health.v1.Health/Check"))
		assert.Contains(t, health, "SERVING")
		req, _ := json.Marshal(map[string]any{"model_name": "tiny", "id": "grpcurl-1",
			"inputs": []map[string]any{{"name": "input", "datatype": "FP32", "shape": shape, "contents": map[string]any{"fp32_contents": images}}}})
		out := runTool(t, grpcurl, req, "-plaintext", "-d", "@", s.grpc, "inference.GRPCInferenceService/ModelInfer")
		var r struct {
			ID      string `json:"id"`
			Outputs []struct {
				Contents struct {
					Fp32Contents []json.RawMessage `json:"fp32Contents"`
				} `json:"contents"`
			} `json:"outputs"`
		}
		require.NoError(t, json.Unmarshal(out, &r), "%s", out)
		assert.Equal(t, "grpcurl-1", r.ID)
		require.Len(t, r.Outputs, 1)
		assert.Equal(t, want, bitsOf(parseFloats(t, r.Outputs[0].Contents.Fp32Contents)))
	})

	t.Run("Go client", func(t *testing.T) {
		hc, err := client.NewHTTP("http://"+s.http, client.HTTPOptions{})
		require.NoError(t, err)
		defer hc.Close()
		gc, err := client.NewGRPC(s.grpc, client.GRPCOptions{})
		require.NoError(t, err)
		defer gc.Close()
		for name, c := range map[string]client.Client{"http": hc, "grpc": gc} {
			r, err := c.Infer(context.Background(), &client.InferRequest{Model: "tiny", Inputs: []client.Tensor{client.FP32("input", shape, images)}})
			require.NoError(t, err, name)
			out, err := r.Output("logits")
			require.NoError(t, err)
			got, err := out.Float32s()
			require.NoError(t, err)
			assert.Equal(t, want, bitsOf(got), name)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		out := string(runTool(t, curl, nil, "-sS", "--fail", "http://"+s.metrics+"/metrics"))
		assert.Contains(t, out, `nv_inference_request_success{model="tiny",version="1"} 5`, "five requests answered so far")
		assert.Contains(t, out, `nv_inference_count{model="tiny",version="1"} 10`)
	})

	err, took := s.stop(t)
	assert.NoError(t, err, "exit status after SIGTERM\n%s", s.logText())
	assert.Less(t, took, 10*time.Second)
}

// TestSIGTERMDrains sends SIGTERM while requests are in flight: readiness
// turns false at once, every accepted request is answered, and the process
// exits 0.
func TestSIGTERMDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ResNet-18 at 250x250 and runs it on the CPU")
	}
	s := startServer(t, "-max-batch", "4", "-workers", "1", "-drain-delay", "300ms", "-grace", "60s")
	gc, err := client.NewGRPC(s.grpc, client.GRPCOptions{})
	require.NoError(t, err)
	defer gc.Close()
	images := make([]float32, 4*3*250*250)
	const inflight = 3
	errs := make(chan error, inflight)
	for i := 0; i < inflight; i++ {
		go func() {
			_, err := gc.Infer(context.Background(), &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{client.FP32("input", []int64{4, 3, 250, 250}, images)}})
			errs <- err
		}()
	}
	// Wait until the server holds them: at least one queued behind the one
	// computing.
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + s.metrics + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `nv_inference_pending_request_count{model="resnet18",version="1"} 2`)
	}, 30*time.Second, 5*time.Millisecond)
	start := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + s.http + "/v2/health/ready")
		if err != nil {
			return true // the listener closed: not ready either
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusBadRequest
	}, 300*time.Millisecond, time.Millisecond, "readiness false within the drain delay")
	for i := 0; i < inflight; i++ {
		assert.NoError(t, <-errs, "accepted request answered during the drain")
	}
	select {
	case err := <-s.exited:
		s.exited <- err
		assert.NoError(t, err, "exit status\n%s", s.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after the drain\n%s", s.logText())
	}
	t.Logf("drained %d requests and exited %v after SIGTERM", inflight, time.Since(start))
}

// TestSIGTERMEndsOpenStreams: a client that keeps a ModelStreamInfer call
// open (as Triton's clients and perf_analyzer --streaming do) does not hold
// the drain up: the server ends the call and exits cleanly well within its
// grace period.
func TestSIGTERMEndsOpenStreams(t *testing.T) {
	s := startServer(t, "-model", "tiny", "-size", "32x32", "-max-batch", "4", "-drain-delay", "0s", "-grace", "60s")
	gc, err := client.NewGRPC(s.grpc, client.GRPCOptions{Stream: true})
	require.NoError(t, err)
	defer gc.Close()
	req := &client.InferRequest{Model: "tiny", Inputs: []client.Tensor{client.FP32("input", []int64{1, 3, 32, 32}, make([]float32, 3*32*32))}}
	_, err = gc.Infer(context.Background(), req)
	require.NoError(t, err, "the stream is open")
	err, took := s.stop(t)
	require.NoError(t, err, "exit status\n%s", s.logText())
	assert.Less(t, took, 20*time.Second, "exited %v after SIGTERM", took)
	_, err = gc.Infer(context.Background(), req)
	assert.Error(t, err, "the stream ended with the server")
}

// TestServeWritesProfiles checks -cpuprofile and -exectrace: once the server
// has drained, the one file holds a pprof profile (gzip-compressed protobuf)
// and the other an execution trace (its header names the Go version); a path
// that cannot be created stops the server before it serves, naming its flag.
func TestServeWritesProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "exec.trace")
	s := startServer(t, "-backend", "nop", "-model", "tiny", "-size", "32x32", "-cpuprofile", cpu, "-exectrace", tr)
	gc, err := client.NewGRPC(s.grpc, client.GRPCOptions{})
	require.NoError(t, err)
	defer gc.Close()
	live, err := gc.Live(context.Background())
	require.NoError(t, err)
	require.True(t, live)
	err, _ = s.stop(t)
	require.NoError(t, err, "exit status\n%s", s.logText())
	b, err := os.ReadFile(cpu)
	require.NoError(t, err)
	require.Greater(t, len(b), 2, "profile of %d bytes", len(b))
	assert.Equal(t, []byte{0x1f, 0x8b}, b[:2], "a gzip stream")
	b, err = os.ReadFile(tr)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(b, []byte("go 1.")), "trace header %q", b[:min(len(b), 16)])
	assert.Contains(t, s.logText(), `"msg":"cpu profile written"`)
	assert.Contains(t, s.logText(), `"msg":"execution trace written"`)

	exe, _ := binaries(t)
	for _, flags := range [][]string{
		{"-cpuprofile", filepath.Join(dir, "missing", "cpu.pprof")},
		{"-cpuprofile", filepath.Join(dir, "cpu2.pprof"), "-exectrace", filepath.Join(dir, "missing", "exec.trace")},
	} {
		args := append([]string{"serve", "-backend", "nop", "-model", "tiny", "-size", "32x32",
			"-http-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-metrics-addr", ""}, flags...)
		out, err := exec.Command(exe, args...).CombinedOutput()
		require.Error(t, err, "serve %v:\n%s", flags, out)
		assert.Contains(t, string(out), flags[len(flags)-2]+": open ")
		assert.NotContains(t, string(out), `msg=serving`)
	}
}
