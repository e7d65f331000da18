// Package serverflag defines, once, the settings of an inference server that
// both `inferbench serve` and the benchmark suite take as flags: each
// Setting's flag names, the values it takes and its help. serve registers one
// value of each; the suite registers one value too or, where the setting is a
// dimension of its matrices, a comma-separated list under the setting's List
// name, and passes the serve processes it starts their settings under Name.
// scripts/sweep's dimension flags are the suite's list flags.
//
// Each program adds only its default and the words of its help that are its
// own, and names the flag in its errors: the checks here return the rule.
package serverflag

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

// A Setting is one server setting as a command-line flag.
type Setting struct {
	// Name is the flag that takes one value (serve's, and the suite's where
	// List is empty).
	Name string
	// List is the suite's flag of a comma-separated list of values, one
	// sub-benchmark each; "" where the suite takes one value under Name.
	List string
	// Values are the values it takes; nil where any value of its kind.
	Values []string
	// Usage says what it sets: the start of both programs' help.
	Usage string
}

// The settings.
var (
	Model = &Setting{Name: "model", Values: []string{"resnet18", "tiny"},
		Usage: "embedded model when there is no -checkpoint: resnet18 or tiny, with torchvision's initialisation drawn from -seed (random weights: its logits are no classification)"}
	Checkpoint = &Setting{Name: "checkpoint",
		Usage: "a torchvision ResNet checkpoint (.pt/.pth zip or legacy pickle, .safetensors) instead of the embedded seeded model"}
	Size      = &Setting{Name: "size", Usage: "input height x width in pixels"}
	Seed      = &Setting{Name: "seed", Usage: "seed of the embedded model's initialisation"}
	ModelName = &Setting{Name: "model-name", Usage: "the model's name in URLs and requests; if not given, -model's (resnet18 or tiny), and resnet18 for a -checkpoint"}
	Convs     = &Setting{Name: "convs", Values: []string{"graph", "legacy"},
		Usage: "convolutions (cuda): graph (cuDNN's backend API, fused with bias, residual and ReLU, where it beats legacy) or legacy (cudnnConvolutionBiasActivationForward)"}
	GRPCServer = &Setting{Name: "grpc-server", Values: []string{protocol.GRPCServerH2, protocol.GRPCServerGo},
		Usage: "the gRPC server: " + protocol.GRPCServerH2 + " (this module's HTTP/2 server: a request's raw input goes from the socket straight into its input buffer) or " + protocol.GRPCServerGo}
	IdlePoll = &Setting{Name: "idle-poll",
		Usage: fmt.Sprintf("how long an idle worker, a request's handler and the reader of an HTTP or gRPC connection keep looking for work, an answer or the next bytes before they sleep (busy CPUs for lower latency one request at a time; 0: sleep at once; at most %v)", inference.MaxIdlePoll)}

	Backend = &Setting{Name: "backend", List: "backends", Values: []string{"cpu", "cuda", "nop"},
		Usage: "back-end: cpu (pure Go), cuda (cuDNN; a -tags cuda build on a GPU machine) or nop (zero-cost: measures the server itself)"}
	Batches  = &Setting{Name: "batches", List: "batches", Usage: "batch sizes the server prepares at start-up (plans, graphs)"}
	Workers  = &Setting{Name: "workers", List: "workers", Usage: "compute workers (each with its own stream on a GPU)"}
	Pipeline = &Setting{Name: "pipeline", List: "pipelines", Values: []string{"serial", "overlap"},
		Usage: "serial (copy-in, compute, copy-out in turn) or overlap (three stages, three batches in flight per worker)"}
	Precision = &Setting{Name: "precision", List: "precisions", Values: []string{"fp32", "tf32", "fp16"},
		Usage: "arithmetic: fp32, tf32 or fp16 (tf32 and fp16 on cuda)"}
	// Graphs is a bool to serve; the suite's list takes on and off.
	Graphs = &Setting{Name: "graphs", List: "graphs", Values: []string{"on", "off"},
		Usage: "replay the forward pass as a CUDA graph per prepared batch size (cuda)"}
	Devices     = &Setting{Name: "devices", List: "devices", Usage: "the GPUs the workers are spread over (cuda)"}
	PinnedInput = &Setting{Name: "pinned-input",
		Usage: "requests' inputs lie in the server's AllocInput memory (Config.PinnedInput), so the cuda back-end needs no staging buffers"}
	MaxQueueDelay = &Setting{Name: "max-queue-delay", Usage: "dynamic batching: how long the server merges queued requests into a batch at most"}
)

// help is s's help for one value, with the program's own words more.
func (s *Setting) help(more string) string {
	switch {
	case more == "":
		return s.Usage
	case strings.HasPrefix(more, "("):
		return s.Usage + " " + more
	}
	return s.Usage + "; " + more
}

// String registers s's flag of one value on fs.
func (s *Setting) String(fs *flag.FlagSet, p *string, def, more string) {
	fs.StringVar(p, s.Name, def, s.help(more))
}

// Int registers s's flag of one value on fs.
func (s *Setting) Int(fs *flag.FlagSet, p *int, def int, more string) {
	fs.IntVar(p, s.Name, def, s.help(more))
}

// Uint64 registers s's flag of one value on fs.
func (s *Setting) Uint64(fs *flag.FlagSet, p *uint64, def uint64, more string) {
	fs.Uint64Var(p, s.Name, def, s.help(more))
}

// Bool registers s's flag of one value on fs.
func (s *Setting) Bool(fs *flag.FlagSet, p *bool, def bool, more string) {
	fs.BoolVar(p, s.Name, def, s.help(more))
}

// Duration registers s's flag of one value on fs.
func (s *Setting) Duration(fs *flag.FlagSet, p *time.Duration, def time.Duration, more string) {
	fs.DurationVar(p, s.Name, def, s.help(more))
}

// RegisterList registers s's list flag on fs: a comma-separated list of
// values.
func (s *Setting) RegisterList(fs *flag.FlagSet, p *string, def, more string) {
	fs.StringVar(p, s.List, def, "comma-separated list, one sub-benchmark each: "+s.help(more))
}

// Check checks one value against Values.
func (s *Setting) Check(v string) error {
	if s.Values == nil || slices.Contains(s.Values, v) {
		return nil
	}
	return fmt.Errorf("want %s", orList(s.Values))
}

// Split splits a comma-separated list, dropping empty items, and checks
// each item against Values.
func (s *Setting) Split(v string) ([]string, error) {
	var out []string
	for _, it := range strings.Split(v, ",") {
		if it = strings.TrimSpace(it); it == "" {
			continue
		}
		if s.Values != nil && !slices.Contains(s.Values, it) {
			return nil, fmt.Errorf("%q is not one of %s", it, strings.Join(s.Values, ", "))
		}
		out = append(out, it)
	}
	return out, nil
}

// orList writes "a", "a or b", "a, b or c".
func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

// Flags are the settings both programs take as one value with the same
// default: the model, its input size and seed, its name, the convolution
// path, the gRPC server and -idle-poll.
type Flags struct {
	Model, Checkpoint, Size, ModelName, Convs, GRPCServer string
	Seed                                                  uint64
	IdlePoll                                              time.Duration

	fs *flag.FlagSet // where Register put them
}

// Register registers f's flags on fs. seedMore and grpcMore are the
// program's own words on the seed and the gRPC server.
func (f *Flags) Register(fs *flag.FlagSet, seedMore, grpcMore string) {
	f.fs = fs
	Model.String(fs, &f.Model, "resnet18", "")
	Checkpoint.String(fs, &f.Checkpoint, "", "")
	Size.String(fs, &f.Size, fmt.Sprintf("%dx%d", inference.DefaultHeight, inference.DefaultWidth), "")
	Seed.Uint64(fs, &f.Seed, inference.DefaultSeed, seedMore)
	ModelName.String(fs, &f.ModelName, "resnet18", "")
	Convs.String(fs, &f.Convs, "legacy", "")
	GRPCServer.String(fs, &f.GRPCServer, protocol.GRPCServerH2, grpcMore)
	IdlePoll.Duration(fs, &f.IdlePoll, 0, "")
}

// Name is the name the model is served under: -model-name if it was given,
// else -model's name, or resnet18 (-model-name's default) for a -checkpoint.
func (f *Flags) Name() string {
	given := false
	if f.fs != nil {
		f.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == ModelName.Name })
	}
	if given || f.Checkpoint != "" {
		return f.ModelName
	}
	return f.Model
}

// Arch is the embedded model -model names.
func Arch(model string) (resnet.Arch, error) {
	switch model {
	case "resnet18":
		return resnet.ResNet18(), nil
	case "tiny":
		return resnet.Tiny(), nil
	}
	return resnet.Arch{}, Model.Check(model)
}

// ParseSize parses -size: HxW, each side one the model takes.
func ParseSize(s string) (h, w int, err error) {
	hs, ws, ok := strings.Cut(s, "x")
	h, err1 := strconv.Atoi(hs)
	w, err2 := strconv.Atoi(ws)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("want HxW in pixels, such as 250x250")
	}
	if err := resnet.CheckInput(h, w); err != nil {
		return 0, 0, err
	}
	return h, w, nil
}

// CheckIdlePoll checks -idle-poll: 0 to inference.MaxIdlePoll.
func CheckIdlePoll(d time.Duration) error {
	if d < 0 || d > inference.MaxIdlePoll {
		return fmt.Errorf("want 0 to %v", inference.MaxIdlePoll)
	}
	return nil
}
