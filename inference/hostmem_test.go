package inference_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/nop"
	"github.com/inferbench/inferbench/inference/resnet"
)

// registrar is the nop back-end whose engine records RegisterHost calls (or
// fails them with fail), or hides RegisterHost when plain is set.
type registrar struct {
	plain bool
	fail  error
	calls *[]string
}

func (r registrar) Name() string { return "registrar" }

func (r registrar) Open(m *resnet.Model, opts backend.Options) (backend.Engine, error) {
	e, err := nop.New().Open(m, opts)
	if err != nil || r.plain {
		return plainEngine{e}, err
	}
	return registrarEngine{Engine: e, r: r}, nil
}

// plainEngine has only backend.Engine's methods.
type plainEngine struct{ backend.Engine }

type registrarEngine struct {
	backend.Engine
	r registrar
}

func (e registrarEngine) RegisterHost(p []byte) (func() error, error) {
	if e.r.fail != nil {
		return nil, e.r.fail
	}
	*e.r.calls = append(*e.r.calls, "register "+string(p))
	return func() error { *e.r.calls = append(*e.r.calls, "unregister "+string(p)); return nil }, nil
}

func TestRegisterHost(t *testing.T) {
	errPin := errors.New("pinning refused")
	tests := []struct {
		name      string
		be        registrar
		mem       []byte
		wantCalls []string
		wantErr   error
		errText   string
	}{
		{name: "engine registers", be: registrar{}, mem: []byte("pages"), wantCalls: []string{"register pages", "unregister pages"}},
		{name: "engine refuses", be: registrar{fail: errPin}, mem: []byte("pages"), wantErr: errPin, errText: "registering 5 bytes of host memory"},
		{name: "engine without registrar", be: registrar{plain: true}, mem: []byte("pages")},
		{name: "no memory", be: registrar{}, mem: nil, errText: "RegisterHost of no memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []string
			tt.be.calls = &calls
			srv, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 2}, Backend: tt.be, Model: tinyModel(t)})
			require.NoError(t, err)
			defer srv.Close()
			unregister, err := srv.RegisterHost(tt.mem)
			if tt.errText != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.errText)
				if tt.wantErr != nil {
					assert.ErrorIs(t, err, tt.wantErr)
				}
				assert.Empty(t, calls)
				return
			}
			require.NoError(t, err)
			assert.NoError(t, unregister())
			assert.Equal(t, tt.wantCalls, calls)
		})
	}
}

func TestCPUAndNopRegisterHostAsNoOp(t *testing.T) {
	for _, device := range []string{"cpu", "nop"} {
		t.Run(device, func(t *testing.T) {
			srv, err := inference.New(inference.Config{Options: inference.Options{Height: 32, Width: 32, MaxBatch: 2}, BackendName: device, Model: tinyModel(t)})
			require.NoError(t, err)
			defer srv.Close()
			in := inference.NewInput(1, 32, 32)
			unregister, err := srv.RegisterHost(make([]byte, 4096))
			require.NoError(t, err)
			_, err = srv.Infer(t.Context(), in)
			assert.NoError(t, err, "inference after registering memory")
			assert.NoError(t, unregister())
		})
	}
}
