package protocol_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/client"
	_ "github.com/inferbench/inferbench/inference/cuda" // registers "cuda" for -backend cuda
	"github.com/inferbench/inferbench/inference/metrics"
	_ "github.com/inferbench/inferbench/inference/nop" // registers "nop", the default -backend
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

var (
	benchBackend   = flag.String("backend", "nop", "back-end of BenchmarkTransport: nop (the front door's own cost), cpu or cuda")
	benchSize      = flag.String("size", "", "input HxW (default 32x32 on nop, 250x250 otherwise)")
	benchBatches   = flag.String("batches", "1", "images per request, comma-separated")
	benchClients   = flag.String("clients", "1,4", "client goroutines, each with one request outstanding, comma-separated")
	benchPrecision = flag.String("precision", "fp32", "fp32, tf32 or fp16 (cuda)")
	benchGraphs    = flag.Bool("graphs", false, "CUDA graphs (cuda)")
	benchWorkers   = flag.Int("workers", 1, "compute workers")
	benchPipeline  = flag.String("pipeline", "serial", "serial or overlap")
	benchGC        = flag.Int("gc-percent", protocol.DefaultGCPercent, "Go GC target for client and server (as cmd/inferbench serve sets it), unless GOGC is set")
)

// setGC sets the GC target as the serve command does, for the benchmark.
func setGC(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		old := debug.SetGCPercent(*benchGC)
		b.Cleanup(func() { debug.SetGCPercent(old) })
	}
}

func benchInts(b *testing.B, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("bad number %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkTransport measures what each way into the server costs, in one run
// and one process: transport=inproc calls Server.Submit directly; grpc,
// grpc-go and http go through the front door over loopback TCP, the Go
// client sending raw contents (gRPC: grpc over h2grpc on both sides, the
// default, grpc-go over grpc-go's client and server) or binary tensor data
// (HTTP). Each of `clients`
// goroutines keeps one request outstanding (closed loop). Latency is from
// the client's send to its decoded answer, on the client's clock; req/s and
// samples/s are over the whole run's wall time. Client and server share the
// machine's cores.
func BenchmarkTransport(b *testing.B) {
	h, w, batches, f := benchSetup(b)
	for _, batch := range batches {
		for _, clients := range benchInts(b, *benchClients) {
			for _, transport := range []string{"inproc", "grpc", "grpc-go", "http"} {
				name := fmt.Sprintf("backend=%s/batch=%d/clients=%d/transport=%s", *benchBackend, batch, clients, transport)
				b.Run(name, func(b *testing.B) { f.run(b, transport, batch, clients, h, w) })
			}
		}
	}
}

type benchFixture struct {
	srv          *inference.Server
	httpURL      string
	grpcAddr     string // the h2grpc server's
	httpClient   *client.HTTPClient
	grpcClient   *client.GRPCClient // h2grpc's client, to the h2grpc server
	grpcGoClient *client.GRPCClient // grpc-go's, to the grpc-go server
}

// benchSetup reads the benchmarks' flags (-gc-percent, -size, -batches)
// and starts the server they describe: the image size, the batch sizes and
// the fixture.
func benchSetup(b *testing.B) (h, w int, batches []int, f *benchFixture) {
	setGC(b)
	h, w = 32, 32
	if *benchBackend != "nop" {
		h, w = 250, 250
	}
	if *benchSize != "" {
		hh, ww, ok := strings.Cut(*benchSize, "x")
		var err1, err2 error
		h, err1 = strconv.Atoi(hh)
		w, err2 = strconv.Atoi(ww)
		if !ok || err1 != nil || err2 != nil {
			b.Fatalf("bad -size %q", *benchSize)
		}
	}
	batches = benchInts(b, *benchBatches)
	return h, w, batches, benchServer(b, h, w, slices.Max(batches), batches)
}

func benchServer(b *testing.B, h, w, maxBatch int, batches []int) *benchFixture {
	pipe, err := backend.ParsePipeline(*benchPipeline)
	if err != nil {
		b.Fatal(err)
	}
	prec, err := backend.ParsePrecision(*benchPrecision)
	if err != nil {
		b.Fatal(err)
	}
	arch := resnet.ResNet18()
	if *benchBackend == "nop" {
		arch = resnet.Tiny() // its 5 logits: the nop model copies input values
	}
	m, err := resnet.New(arch, 1)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := inference.New(inference.Config{
		Options:     backend.Options{Height: h, Width: w, MaxBatch: maxBatch, Batches: batches, Workers: *benchWorkers, Pipeline: pipe, Precision: prec, Graphs: *benchGraphs, PinnedInput: true},
		BackendName: *benchBackend, Model: m,
		MaxQueue: 4096,
	})
	if err != nil {
		if *benchBackend == "cuda" {
			b.Skipf("cuda back-end: %v", err)
		}
		b.Fatal(err)
	}
	model, err := protocol.NewModel(srv, protocol.ModelConfig{})
	if err != nil {
		b.Fatal(err)
	}
	svc := protocol.New(model, protocol.Options{SharedMemory: protocol.SharedMemoryLimits{Enabled: true}}) // BenchmarkSharedMemory's
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: svc.HTTPHandler()}
	go hs.Serve(hl)
	f := &benchFixture{srv: srv, httpURL: "http://" + hl.Addr().String()}
	if f.httpClient, err = client.NewHTTP(f.httpURL, client.HTTPOptions{}); err != nil {
		b.Fatal(err)
	}
	var grpcs []protocol.GRPCServer
	for _, impl := range []string{protocol.GRPCServerH2, protocol.GRPCServerGo} {
		gs, err := svc.NewGRPCServer(impl, protocol.GRPCLimits{})
		if err != nil {
			b.Fatal(err)
		}
		gl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go gs.Serve(gl)
		grpcs = append(grpcs, gs)
		if impl == protocol.GRPCServerH2 {
			f.grpcAddr = gl.Addr().String()
			f.grpcClient, err = client.NewGRPC(f.grpcAddr, client.GRPCOptions{})
		} else {
			f.grpcGoClient, err = client.NewGRPC(gl.Addr().String(), client.GRPCOptions{Transport: client.TransportGRPCGo})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		f.httpClient.Close()
		f.grpcClient.Close()
		f.grpcGoClient.Close()
		hs.Close()
		for _, gs := range grpcs {
			gs.Stop()
		}
		svc.Close()
		srv.Close()
	})
	return f
}

func (f *benchFixture) run(b *testing.B, transport string, batch, clients, h, w int) {
	in, err := f.srv.AllocInput(batch)
	if err != nil {
		b.Fatal(err)
	}
	defer f.srv.FreeInput(in)
	for i := range in.Data {
		in.Data[i] = float32(i%251) / 251
	}
	req := &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{client.FP32("input", []int64{int64(batch), 3, int64(h), int64(w)}, in.Data)}}
	out := make([][]float32, clients)
	send := func(c int) error {
		switch transport {
		case "inproc":
			call, err := f.srv.Submit(context.Background(), inference.Request{Input: in, Logits: out[c]})
			if err != nil {
				return err
			}
			return call.Err()
		case "grpc":
			_, err := f.grpcClient.Infer(context.Background(), req)
			return err
		case "grpc-go":
			_, err := f.grpcGoClient.Infer(context.Background(), req)
			return err
		}
		_, err := f.httpClient.Infer(context.Background(), req)
		return err
	}
	for c := range out {
		out[c] = make([]float32, batch*f.srv.Classes())
		if err := send(c); err != nil { // warm the connection and the buffer pool
			b.Fatal(err)
		}
	}
	closedLoop(b, clients, batch, send)
}

var (
	benchPayload        = flag.String("payload-mib", "0.75,24,192", "BenchmarkPayload message sizes in MiB, comma-separated (192 MiB: a batch of 256 fp32 3x250x250 images is 183 MiB)")
	benchPayloadClients = flag.String("payload-clients", "1", "BenchmarkPayload clients, each on a connection of its own, comma-separated")
)

// BenchmarkPayload measures what loopback itself allows, with no model and
// no decoding: each of clients clients sends size bytes at a time and waits
// for a 4-byte answer, over a raw TCP connection (transport=tcp), an HTTP
// POST whose handler reads the body into a reused buffer (http), or a gRPC
// unary call carrying the bytes (grpc, server reflection-free: a one-method
// service on the same grpc-go settings as the front door), every client on a
// connection (and server) of its own. bytes/s over the run's wall time, all
// clients together, is each transport's ceiling for that many connections;
// the front door's figures at as many connections are judged against it.
func BenchmarkPayload(b *testing.B) {
	for _, s := range strings.Split(*benchPayload, ",") {
		mib, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || mib <= 0 {
			b.Fatalf("bad -payload-mib %q", s)
		}
		size := int(mib * (1 << 20))
		for _, clients := range benchInts(b, *benchPayloadClients) {
			for _, transport := range []string{"tcp", "http", "grpc"} {
				name := fmt.Sprintf("bytes=%d/transport=%s", size, transport)
				if clients > 1 {
					name = fmt.Sprintf("bytes=%d/clients=%d/transport=%s", size, clients, transport)
				}
				b.Run(name, func(b *testing.B) {
					sends := make([]func([]byte) error, clients)
					msgs := make([][]byte, clients)
					for c := range sends {
						sends[c] = payloadTransport(b, transport, size)
						msgs[c] = make([]byte, size)
						if err := sends[c](msgs[c]); err != nil {
							b.Fatal(err)
						}
					}
					b.SetBytes(int64(size))
					elapsed, _ := clientLoop(b, clients, func(c int) error { return sends[c](msgs[c]) })
					b.ReportMetric(float64(b.N)*float64(size)/elapsed.Seconds(), "bytes/s")
				})
			}
		}
	}
}

// closedLoop runs b.N requests from clients goroutines, each sending one at a
// time with send(client), and reports req/s and samples/s over the wall time
// of the whole run and the p50 and p99 latency of send on the client's clock.
func closedLoop(b *testing.B, clients, batch int, send func(c int) error) {
	elapsed, all := clientLoop(b, clients, send)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "samples/s")
	b.ReportMetric(float64(all.Quantile(0.5)), "p50-latency-ns")
	b.ReportMetric(float64(all.Quantile(0.99)), "p99-latency-ns")
}

// clientLoop runs b.N calls of send from clients goroutines, each calling
// send(client) one at a time, and returns the wall time of the whole run and
// the calls' latencies. The timer is reset at the start and stopped at the
// end.
func clientLoop(b *testing.B, clients int, send func(c int) error) (time.Duration, *metrics.Histogram) {
	hists := make([]metrics.Histogram, clients)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := send(c); err != nil {
					b.Error(err)
					return
				}
				hists[c].Record(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all metrics.Histogram
	for i := range hists {
		all.Merge(&hists[i])
	}
	return elapsed, &all
}
