package protocol

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/inferbench/inferbench/inference"
)

// The names of the served model's one input and one output tensor.
const (
	InputName  = "input"
	OutputName = "logits"
	// Platform is the model metadata's platform: a ResNet run by this
	// project's engines.
	Platform = "inferbench_resnet"
)

// Model is one inference.Server served under a name and a version.
type Model struct {
	name, version string
	srv           *inference.Server
	// Input geometry [n, channels, height, width] and logits per image.
	channels, height, width, classes, maxBatch int
	lut                                        [][256]float32 // UINT8 normalisation, per channel
	// uint8Device says UINT8 binary inputs go to the server as bytes, to be
	// normalised on the device: the server can (Server.Uint8OnDevice) with
	// the model's normalisation.
	uint8Device bool
	inputs      *inputPool
	// idlePoll is the server's Config.IdlePoll: how long a request's handler
	// looks for its answer before it sleeps.
	idlePoll time.Duration
}

// bytesToServer reports whether binary input of datatype goes to the server
// as uint8 bytes (normalised on the device) rather than widened here.
func (m *Model) bytesToServer(datatype string) bool { return datatype == UINT8 && m.uint8Device }

// ModelConfig names a served model and bounds its front door's memory.
type ModelConfig struct {
	// Name and Version are how clients address the model; "" means
	// "resnet18" and "1".
	Name, Version string
	// Normalization maps UINT8 inputs to the model's float input; zero means
	// ImageNet. When it is the server's Config.Normalization and the server
	// normalises uint8 on the device (Server.Uint8OnDevice), UINT8 inputs
	// sent as binary data (HTTP binary, gRPC raw, shared memory) go to the
	// server as bytes; otherwise they are normalised here, on the host.
	Normalization Normalization
	// InflightBytes bounds the bytes of input tensors held by requests being
	// decoded or served (float32 after widening); zero means
	// DefaultInflightBytes, and it is raised to hold at least one MaxBatch
	// request. Up to as many bytes of released buffers are kept for reuse.
	InflightBytes int64
}

// DefaultInflightBytes is ModelConfig.InflightBytes when zero: 4 GiB.
const DefaultInflightBytes = 4 << 30

// NewModel serves srv. The model does not own srv: shut srv down after the
// transports that use the model have stopped.
func NewModel(srv *inference.Server, cfg ModelConfig) (*Model, error) {
	if cfg.Name == "" {
		cfg.Name = "resnet18"
	}
	if cfg.Version == "" {
		cfg.Version = "1"
	}
	if cfg.Normalization.Mean == nil && cfg.Normalization.Std == nil {
		cfg.Normalization = ImageNet
	}
	sc := srv.Config()
	probe, err := srv.AllocInput(1)
	if err != nil {
		return nil, err
	}
	channels := probe.Shape[1]
	if err := srv.FreeInput(probe); err != nil {
		return nil, err
	}
	if err := cfg.Normalization.Check(channels); err != nil {
		return nil, fmt.Errorf("protocol: %w", err)
	}
	m := &Model{
		name: cfg.Name, version: cfg.Version, srv: srv,
		channels: channels, height: sc.Height, width: sc.Width, classes: srv.Classes(), maxBatch: sc.MaxBatch,
		lut:         cfg.Normalization.Table(),
		uint8Device: srv.Uint8OnDevice() && slices.Equal(cfg.Normalization.Mean, sc.Normalization.Mean) && slices.Equal(cfg.Normalization.Std, sc.Normalization.Std),
		idlePoll:    sc.IdlePoll,
	}
	limit := cfg.InflightBytes
	if limit <= 0 {
		limit = DefaultInflightBytes
	}
	limit = max(limit, int64(m.maxBatch)*int64(m.imageValues())*4)
	m.inputs = newInputPool(srv, limit, sc.QueuePolicy == inference.Reject)
	return m, nil
}

// Name and Version are the model's address.
func (m *Model) Name() string    { return m.name }
func (m *Model) Version() string { return m.version }

// Server is the inference server behind the model.
func (m *Model) Server() *inference.Server { return m.srv }

func (m *Model) imageValues() int { return m.channels * m.height * m.width }

// InputShape and OutputShape are the metadata's shapes; -1 is the batch.
func (m *Model) InputShape() []int64 {
	return []int64{-1, int64(m.channels), int64(m.height), int64(m.width)}
}
func (m *Model) OutputShape() []int64 { return []int64{-1, int64(m.classes)} }

// ready reports whether the model can answer, with the cause when it cannot.
func (m *Model) ready() (bool, error) { return m.srv.Ready() }

// matches reports whether version addresses this model ("" chooses it).
func (m *Model) matches(version string) bool { return version == "" || version == m.version }

// checkInput validates an input tensor's name, datatype and shape against the
// model before any of its data is read, and returns its batch size.
func (m *Model) checkInput(name, datatype string, shape []int64) (int, error) {
	if name != InputName {
		return 0, badRequest("unexpected input %q: model %s has one input, %q", name, m.name, InputName)
	}
	if elemSize(datatype) == 0 {
		return 0, badRequest("input %q: datatype %q not supported: want %s, %s or %s", name, datatype, FP32, FP16, UINT8)
	}
	want := m.InputShape()
	if len(shape) != len(want) {
		return 0, badRequest("input %q: shape %v has rank %d, want %v (rank 4, NCHW)", name, shape, len(shape), want)
	}
	for i := 1; i < len(want); i++ {
		if shape[i] != want[i] {
			return 0, badRequest("input %q: shape %v, want %v", name, shape, want)
		}
	}
	if shape[0] < 1 || shape[0] > int64(m.maxBatch) {
		return 0, badRequest("input %q: batch %d outside 1..%d (shape %v, want %v)", name, shape[0], m.maxBatch, shape, want)
	}
	return int(shape[0]), nil
}

// byteSize is the size in bytes of n images of datatype.
func (m *Model) byteSize(n int, datatype string) int {
	return n * m.imageValues() * elemSize(datatype)
}

// bufferImages is the batch size of the smallest pool tensor (float32
// images) whose memory holds n bytes: UINT8 inputs that go to the server as
// bytes are read into the first n bytes of one, so that they too are in the
// server's own (pinned) memory.
func (m *Model) bufferImages(n int) int {
	per := 4 * m.imageValues()
	return max(1, (n+per-1)/per)
}

// run submits one decoded request and returns when the server answers or ctx
// ends. Its input is a buffer from m.inputs or a view of a shared-memory
// region, its logits a new slice or a view of one. done is called once the
// server no longer reads req.Input nor writes req.Logits (the buffer may go
// back to the pool, the region be let go): at once when Submit refuses the
// request; on the answer; or, when ctx ends first, by a goroutine that waits
// for the answer, which follows promptly as the server drops an abandoned
// request or discards its result. done's
// argument says whether the answer was Server.Close failing the accepted
// request, which may come before the workers have left its batch. timeout,
// if positive, bounds the request from now.
func (m *Model) run(ctx context.Context, req inference.Request, timeout time.Duration, done func(closed bool)) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	call, err := m.srv.Submit(ctx, req)
	if err != nil {
		done(false)
		return err
	}
	closed := func() bool { return errors.Is(call.Err(), inference.ErrServerClosed) }
	inference.PollDone(m.idlePoll, call.Done(), ctx.Done())
	select {
	case <-call.Done():
		done(closed())
		return call.Err()
	case <-ctx.Done():
		go func() {
			<-call.Done()
			done(closed())
		}()
		return ctx.Err()
	}
}

// timeoutParam reads the optional "timeout" request parameter (microseconds,
// as Triton defines it).
func timeoutParam(v any, ok bool) (time.Duration, error) {
	if !ok {
		return 0, nil
	}
	us, isInt := asInt64(v)
	if !isInt || us < 0 {
		return 0, badRequest("parameter \"timeout\" must be a non-negative integer of microseconds, got %v", v)
	}
	return time.Duration(us) * time.Microsecond, nil
}

func (m *Model) String() string { return fmt.Sprintf("%s/%s", m.name, m.version) }
