package suite

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/inferbench/inferbench/inference/client"
)

// wireClient is what the suite asks of a client of a server: both
// transports offer it.
type wireClient interface {
	client.Client
	client.SharedMemory
	client.CudaSharedMemory
	client.Statistics
}

// dial returns a client of the server at addr speaking scheme (grpc or
// http), over TLS with tlsCfg if set. It connects on its first call.
func dial(scheme, addr string, tlsCfg *tls.Config) (wireClient, error) {
	if scheme == grpcT {
		return client.NewGRPC(addr, client.GRPCOptions{Conns: conf.flags.grpcConns, Stream: conf.flags.grpcStream, ReadPoll: conf.flags.clientPoll, Transport: conf.flags.grpcClient, TLS: tlsCfg})
	}
	if tlsCfg != nil {
		return client.NewHTTP("https://"+addr, client.HTTPOptions{ReadPoll: conf.flags.clientPoll, TLS: tlsCfg})
	}
	return client.NewHTTP("http://"+addr, client.HTTPOptions{ReadPoll: conf.flags.clientPoll})
}

// remoteModel is what a server's metadata says of the model the suite
// drives: one FP32 input of [batch, C, H, W] images, and its outputs.
type remoteModel struct {
	name       string
	input      string
	fixedBatch int64 // the input's batch dimension when the model fixes it; -1: any
	c, h, w    int64
	outputs    []remoteOutput
	server     string // the server's name and version
	stats      bool   // the server offers the statistics extension
	shm        bool   // ... and system shared memory
	cudaSHM    bool   // ... and CUDA shared memory
}

// remoteOutput is one output: its name and bytes per image (-1: the model
// does not say).
type remoteOutput struct {
	name          string
	bytesPerImage int64
}

// dtypeBytes are the sizes of the protocol's fixed-size datatypes.
var dtypeBytes = map[string]int64{"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2,
	"UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8}

// learnModel asks a server for its metadata and model's: an image model the
// suite can drive, with -size filling dimensions the model leaves open.
func learnModel(ctx context.Context, c wireClient, name string, h, w int) (remoteModel, error) {
	m := remoteModel{name: name}
	sm, err := c.ServerMetadata(ctx)
	if err != nil {
		return m, fmt.Errorf("server metadata: %w", err)
	}
	m.server = strings.TrimSpace(sm.Name + " " + sm.Version)
	m.stats = slices.Contains(sm.Extensions, "statistics")
	m.shm = slices.Contains(sm.Extensions, "system_shared_memory")
	m.cudaSHM = slices.Contains(sm.Extensions, "cuda_shared_memory")
	md, err := c.ModelMetadata(ctx, name, "")
	if err != nil {
		return m, fmt.Errorf("model %q: metadata: %w", name, err)
	}
	if len(md.Inputs) != 1 {
		return m, fmt.Errorf("model %q has %d inputs: the suite sends one tensor of images", name, len(md.Inputs))
	}
	in := md.Inputs[0]
	if in.Datatype != "FP32" || len(in.Shape) != 4 {
		return m, fmt.Errorf("model %q: input %q is %s %v: the suite sends FP32 [batch, C, H, W]", name, in.Name, in.Datatype, in.Shape)
	}
	m.input, m.fixedBatch, m.c, m.h, m.w = in.Name, in.Shape[0], in.Shape[1], in.Shape[2], in.Shape[3]
	if m.h == -1 {
		m.h = int64(h)
	}
	if m.w == -1 {
		m.w = int64(w)
	}
	if m.fixedBatch == 0 || m.fixedBatch < -1 || m.c < 1 || m.h < 1 || m.w < 1 {
		return m, fmt.Errorf("model %q: input %q of shape %v: want [batch or -1, C, H, W], H and W given or -1 (then -size)", name, in.Name, in.Shape)
	}
	for _, o := range md.Outputs {
		out := remoteOutput{name: o.Name, bytesPerImage: dtypeBytes[o.Datatype]}
		if out.bytesPerImage == 0 || len(o.Shape) == 0 {
			out.bytesPerImage = -1
		}
		for _, d := range o.Shape[min(1, len(o.Shape)):] {
			if d < 1 {
				out.bytesPerImage = -1
				break
			}
			out.bytesPerImage *= d
		}
		m.outputs = append(m.outputs, out)
	}
	if len(m.outputs) == 0 {
		return m, fmt.Errorf("model %q: metadata lists no output", name)
	}
	return m, nil
}

// sameModel checks that another server serves the model as m describes it.
func (m remoteModel) sameModel(o remoteModel) error {
	if m.input != o.input || m.fixedBatch != o.fixedBatch || m.c != o.c || m.h != o.h || m.w != o.w ||
		!slices.Equal(m.outputs, o.outputs) {
		return fmt.Errorf("model %q differs between servers: %s, and %s", m.name, m.shape(), o.shape())
	}
	return nil
}

// shape describes the model's tensors for an error message.
func (m remoteModel) shape() string {
	return fmt.Sprintf("input %q [%d %d %d %d], outputs %v", m.input, m.fixedBatch, m.c, m.h, m.w, m.outputs)
}

// checkBatch says whether requests of batch images fit the model.
func (m remoteModel) checkBatch(batch int) error {
	if m.fixedBatch != -1 && int64(batch) != m.fixedBatch {
		return fmt.Errorf("model %q takes batches of %d images only, not %d (-batches)", m.name, m.fixedBatch, batch)
	}
	return nil
}

// outputBytes is the bytes of every output of a batch of batch images, or
// an error when an output's size is not known.
func (m remoteModel) outputBytes(batch int) (int64, error) {
	var sum int64
	for _, o := range m.outputs {
		if o.bytesPerImage < 0 {
			return 0, fmt.Errorf("model %q: output %q has no fixed size per image, so it cannot be given a shared-memory region", m.name, o.name)
		}
		sum += o.bytesPerImage * int64(batch)
	}
	return sum, nil
}

// probeTargets learns the model from every -target and checks that they
// agree; the suite's size is then the model's.
func (c *config) probeTargets(ctx context.Context) error {
	var models []remoteModel
	for _, t := range c.targets {
		cl, err := dial(t.scheme, t.addr, c.targetTLS)
		if err != nil {
			return fmt.Errorf("-target %s: %w", t.url, err)
		}
		m, err := learnModel(ctx, cl, c.flags.shared.Name(), c.h, c.w)
		cl.Close()
		if err != nil {
			return fmt.Errorf("-target %s: %w", t.url, err)
		}
		if len(models) > 0 {
			if err := models[0].sameModel(m); err != nil {
				return fmt.Errorf("-target %s: %w", t.url, err)
			}
		}
		models = append(models, m)
	}
	m := models[0]
	var servers []string
	for _, o := range models {
		if !slices.Contains(servers, o.server) {
			servers = append(servers, o.server)
		}
		m.stats = m.stats && o.stats
		if !o.shm && slices.ContainsFunc(c.transports, shmTransport) {
			return errors.New("-transports: a target does not offer the system_shared_memory extension (inferbench serve: -shm)")
		}
		if !o.cudaSHM && slices.ContainsFunc(c.transports, cudaSHMTransport) {
			return errors.New("-transports: a target does not offer the cuda_shared_memory extension (inferbench serve: -shm -backend cuda)")
		}
	}
	for _, b := range c.batchesFor("target") {
		if err := m.checkBatch(b); err != nil {
			return err
		}
	}
	m.server = strings.Join(servers, ", ")
	c.remote = &m
	c.h, c.w = int(m.h), int(m.w)
	return nil
}
