package serverflag

import (
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var all = []*Setting{Model, Checkpoint, Size, Seed, ModelName, Convs, GRPCServer, IdlePoll,
	Backend, Batches, Workers, Pipeline, Precision, Graphs, Devices, PinnedInput, MaxQueueDelay}

// TestSettings: every setting has a name and a help, and its help names
// each of its values (but Graphs', a bool to serve).
func TestSettings(t *testing.T) {
	names := map[string]bool{}
	for _, s := range all {
		require.NotEmpty(t, s.Name)
		assert.False(t, names[s.Name], "-%s defined twice", s.Name)
		names[s.Name] = true
		assert.NotEmpty(t, s.Usage, "-%s", s.Name)
		if s == Graphs {
			continue
		}
		for _, v := range s.Values {
			assert.Contains(t, s.Usage, v, "-%s's help", s.Name)
		}
	}
}

func TestCheck(t *testing.T) {
	assert.NoError(t, Pipeline.Check("overlap"))
	assert.EqualError(t, Pipeline.Check("parallel"), "want serial or overlap")
	assert.EqualError(t, Precision.Check("bf16"), "want fp32, tf32 or fp16")
	assert.NoError(t, ModelName.Check("anything"), "a setting without Values")
}

func TestSplit(t *testing.T) {
	got, err := Precision.Split(" fp16,, tf32 ")
	require.NoError(t, err)
	assert.Equal(t, []string{"fp16", "tf32"}, got)
	_, err = Precision.Split("fp16,bf16")
	assert.EqualError(t, err, `"bf16" is not one of fp32, tf32, fp16`)
	got, err = Workers.Split("1,2")
	require.NoError(t, err)
	assert.Equal(t, []string{"1", "2"}, got)
}

// TestRegister: the one-value and list flags carry the setting's help and
// the program's own words.
func TestRegister(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var f Flags
	f.Register(fs, "also of the inputs", "")
	var pipe, pipes string
	Pipeline.String(fs, &pipe, "serial", "")
	Pipeline.RegisterList(fs, &pipes, "serial,overlap", "")
	require.NoError(t, fs.Parse([]string{"-pipelines", "overlap", "-idle-poll", "1ms"}))
	assert.Equal(t, "overlap", pipes)
	assert.Equal(t, "serial", pipe)
	assert.Equal(t, "1ms", f.IdlePoll.String())
	assert.Equal(t, Pipeline.Usage, fs.Lookup("pipeline").Usage)
	assert.True(t, strings.HasPrefix(fs.Lookup("pipelines").Usage, "comma-separated list"), fs.Lookup("pipelines").Usage)
	assert.Contains(t, fs.Lookup("pipelines").Usage, Pipeline.Usage)
	assert.Equal(t, Seed.Usage+"; also of the inputs", fs.Lookup("seed").Usage)
}

// TestName: the model is served under -model-name if given, else under the
// embedded model's name, and as resnet18 from a checkpoint.
func TestName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "resnet18"},
		{[]string{"-model", "tiny"}, "tiny"},
		{[]string{"-model", "tiny", "-model-name", "rn"}, "rn"},
		{[]string{"-model-name", "rn"}, "rn"},
		{[]string{"-checkpoint", "w.pth"}, "resnet18"},
		{[]string{"-checkpoint", "w.pth", "-model-name", "mine"}, "mine"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var f Flags
		f.Register(fs, "", "")
		require.NoError(t, fs.Parse(tc.args))
		assert.Equal(t, tc.want, f.Name(), "%q", tc.args)
	}
}
