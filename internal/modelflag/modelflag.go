// Package modelflag is the one definition of the flags that both `inferbench
// serve` and the benchmark suite take: which model is served and under what
// name, its input size and seed, how the cuda back-end runs convolutions,
// and which gRPC server runs. Each program registers them from here and
// parses them with the functions here (-convs with backend.ParseConvs),
// adding only the help that is its own.
package modelflag

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/protocol"
	"github.com/inferbench/inferbench/inference/resnet"
)

// The flags' names.
const (
	Model      = "model"
	Checkpoint = "checkpoint"
	Size       = "size"
	Seed       = "seed"
	ModelName  = "model-name"
	Convs      = "convs"
	GRPCServer = "grpc-server"
)

// Flags are the values of the shared flags.
type Flags struct {
	Model, Checkpoint, Size, ModelName, Convs, GRPCServer string
	Seed                                                  uint64
}

// Register registers the shared flags on fs. seedUsage and grpcUsage say
// what the seed and the gRPC server choice mean to the program.
func (f *Flags) Register(fs *flag.FlagSet, seedUsage, grpcUsage string) {
	fs.StringVar(&f.Model, Model, "resnet18", "embedded model when there is no -checkpoint: resnet18 or tiny, with torchvision's initialisation drawn from -seed (random weights: its logits are no classification)")
	fs.StringVar(&f.Checkpoint, Checkpoint, "", "a torchvision ResNet checkpoint (.pt/.pth zip or legacy pickle, .safetensors) instead of the embedded seeded model")
	fs.StringVar(&f.Size, Size, fmt.Sprintf("%dx%d", inference.DefaultHeight, inference.DefaultWidth), "input height x width in pixels")
	fs.Uint64Var(&f.Seed, Seed, inference.DefaultSeed, seedUsage)
	fs.StringVar(&f.ModelName, ModelName, "resnet18", "the model's name in URLs and requests")
	fs.StringVar(&f.Convs, Convs, "legacy", "convolutions (cuda): graph (cuDNN's backend API, fused with bias, residual and ReLU, where it beats legacy) or legacy (cudnnConvolutionBiasActivationForward)")
	fs.StringVar(&f.GRPCServer, GRPCServer, protocol.GRPCServerH2, grpcUsage+": "+protocol.GRPCServerH2+" (this module's HTTP/2 server: a request's raw input goes from the socket straight into its input buffer) or "+protocol.GRPCServerGo)
}

// Arch is the embedded model -model names.
func Arch(model string) (resnet.Arch, error) {
	switch model {
	case "resnet18":
		return resnet.ResNet18(), nil
	case "tiny":
		return resnet.Tiny(), nil
	}
	return resnet.Arch{}, fmt.Errorf("want resnet18 or tiny")
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

// CheckGRPCServer checks -grpc-server.
func CheckGRPCServer(s string) error {
	if s != protocol.GRPCServerH2 && s != protocol.GRPCServerGo {
		return fmt.Errorf("want %s or %s", protocol.GRPCServerH2, protocol.GRPCServerGo)
	}
	return nil
}
