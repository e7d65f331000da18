//go:build linux

package protocol_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/inference/protocol"
)

// The shared-memory API's fences (shmaccess.go): off by default, a required
// header, a key prefix, only regular objects of the server's user, and
// namespaces.

// headerTransport sends header with every request.
type headerTransport struct {
	header map[string]string
	rt     http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header.Set(k, v)
	}
	return h.rt.RoundTrip(r)
}

// caller is a client of one transport that sends a set of headers with each
// call: as HTTP headers, or as gRPC metadata in ctx (its gRPC calls, Infer
// included, go through grpc-go's client, which sends the context's
// metadata).
type caller struct {
	shmClient
	ctx context.Context
}

// callers are one caller of each transport (HTTP, and gRPC to both gRPC
// servers) sending header.
func (f *fixture) callers(t *testing.T, header map[string]string) map[string]caller {
	hc, err := client.NewHTTP(f.http.URL, client.HTTPOptions{Transport: headerTransport{header, &http.Transport{}}})
	require.NoError(t, err)
	t.Cleanup(func() { hc.Close() })
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.New(header))
	out := map[string]caller{"http": {hc, context.Background()}}
	for name, addr := range map[string]string{"grpc": f.grpc, "grpc, grpc-go server": f.grpcGo} {
		c, err := client.NewGRPC(addr, client.GRPCOptions{Transport: client.TransportGRPCGo})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		out[name] = caller{c, ctx}
	}
	return out
}

// transportOf is the transport assertAnswer checks a caller's answers as.
func transportOf(name string) string {
	if name == "http" {
		return "http"
	}
	return "grpc"
}

// regionRequest asks for one image from region in and its logits in
// region out at byte outOff.
func regionRequest(in, out string, outOff int64) *client.InferRequest {
	r := shmRequest(1, 0, outOff)
	r.Inputs[0].Region.Name = in
	r.OutputRegions["logits"] = client.Region{Name: out, Offset: outOff, ByteSize: 4 * classes}
	return r
}

// snapshot is a file's bytes, for checking that nothing wrote them.
func snapshot(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestSharedMemoryIsOffByDefault: with the zero SharedMemoryLimits, no
// shared-memory call is served, on any transport, and an object a client
// names is never opened.
func TestSharedMemoryIsOffByDefault(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, fixtureOpts{opts: protocol.Options{SharedMemory: protocol.SharedMemoryLimits{Dir: dir}}})
	obj := newObject(t, dir, "/inferbench-victim", imageBytes+4*classes)
	obj.writeFloats(0, randomImages(1, 1))
	before := snapshot(t, obj.f.Name())
	for name, c := range f.callers(t, nil) {
		t.Run(name, func(t *testing.T) {
			tr := transportOf(name)
			md, err := c.ServerMetadata(c.ctx)
			require.NoError(t, err)
			assert.NotContains(t, md.Extensions, "system_shared_memory")
			assert.NotContains(t, md.Extensions, "cuda_shared_memory")
			const off = "system shared memory is turned off on this server"
			assertAnswer(t, tr, c.RegisterSystemSharedMemory(c.ctx, "v", "/inferbench-victim", 0, imageBytes+4*classes), http.StatusBadRequest, codes.Unimplemented, off)
			_, err = c.SystemSharedMemoryStatus(c.ctx, "")
			assertAnswer(t, tr, err, http.StatusBadRequest, codes.Unimplemented, off)
			assertAnswer(t, tr, c.UnregisterSystemSharedMemory(c.ctx, ""), http.StatusBadRequest, codes.Unimplemented, off)
			_, err = c.Infer(c.ctx, regionRequest("v", "v", imageBytes))
			assertAnswer(t, tr, err, http.StatusBadRequest, codes.InvalidArgument, `shared-memory region "v": shared memory is turned off on this server`)
		})
	}
	for _, path := range []string{"/v2/cudasharedmemory/status", "/v2/systemsharedmemory/status"} {
		a := send(t, f.http.URL, rawRequest{method: http.MethodGet, path: path})
		assert.Equal(t, http.StatusBadRequest, a.status, path)
		assert.Contains(t, a.errMsg, "shared memory is turned off", path)
	}
	assert.Equal(t, before, snapshot(t, obj.f.Name()), "the object's bytes")
}

// TestSharedMemoryRefusesObjectsNotMadeForIt registers, as a client that
// knows names in /dev/shm, an object of another process (mode 0600, this
// user, a name without the key prefix), a symbolic link and a hard link to
// it under names with the prefix, a FIFO, and (as root) an object of another
// user: each is refused, and the object's bytes are untouched by the
// inference requests that name them.
func TestSharedMemoryRefusesObjectsNotMadeForIt(t *testing.T) {
	const shm = "/dev/shm"
	if st, err := os.Stat(shm); err != nil || !st.IsDir() {
		t.Skipf("no %s: %v", shm, err)
	}
	tag := fmt.Sprintf("%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	path := func(name string) string { return filepath.Join(shm, name+"-"+tag) }
	key := func(name string) string { return "/" + name + "-" + tag }
	victim := path("victim")
	secret := bytes.Repeat([]byte("secret! "), (imageBytes+4*classes)/8+1)
	require.NoError(t, os.WriteFile(victim, secret, 0o600))
	t.Cleanup(func() { os.Remove(victim) })
	require.NoError(t, os.Symlink(victim, path("inferbench-link")))
	t.Cleanup(func() { os.Remove(path("inferbench-link")) })
	require.NoError(t, os.Link(victim, path("inferbench-hard")))
	t.Cleanup(func() { os.Remove(path("inferbench-hard")) })
	require.NoError(t, syscall.Mkfifo(path("inferbench-fifo"), 0o600))
	t.Cleanup(func() { os.Remove(path("inferbench-fifo")) })

	f := newFixture(t, fixtureOpts{opts: protocol.Options{SharedMemory: protocol.SharedMemoryLimits{Enabled: true, KeyPrefix: "inferbench-", Dir: shm}}})
	size := uint64(imageBytes + 4*classes)
	tests := []struct{ name, key, msg string }{
		{"another process's object", key("victim"), `this server maps only objects whose names start with "inferbench-"`},
		{"a symbolic link with the prefix", key("inferbench-link"), "opening " + path("inferbench-link") + " read-write"},
		{"a hard link with the prefix", key("inferbench-hard"), "has 2 names (hard links)"},
		{"a FIFO", key("inferbench-fifo"), "is not a regular file"},
	}
	if os.Geteuid() == 0 {
		other := path("inferbench-other")
		require.NoError(t, os.WriteFile(other, secret, 0o666))
		t.Cleanup(func() { os.Remove(other) })
		require.NoError(t, os.Chown(other, 65534, 65534))
		tests = append(tests, struct{ name, key, msg string }{"another user's object", key("inferbench-other"), "belongs to user 65534"})
	}
	for name, c := range f.callers(t, nil) {
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				tr := transportOf(name)
				assertAnswer(t, tr, c.RegisterSystemSharedMemory(c.ctx, "v", tt.key, 0, size), http.StatusBadRequest, codes.InvalidArgument, tt.msg)
				// The attack: read the object as input, write logits into it.
				_, err := c.Infer(c.ctx, regionRequest("v", "v", imageBytes))
				assertAnswer(t, tr, err, http.StatusNotFound, codes.NotFound, `unknown shared-memory region "v"`)
				st, err := c.SystemSharedMemoryStatus(c.ctx, "")
				require.NoError(t, err)
				assert.Empty(t, st)
			})
		}
	}
	assert.Equal(t, secret, snapshot(t, victim), "the victim's bytes")
}

// TestSharedMemoryRequiredHeader: with a required header, every call of the
// API without it, or with another value, is refused (403, PermissionDenied)
// before anything is mapped; with it (over gRPC also in Triton's spelling)
// the API works; inference requests that name no region need no header.
func TestSharedMemoryRequiredHeader(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{opts: protocol.Options{SharedMemory: protocol.SharedMemoryLimits{Header: "shm-key", HeaderValue: "s3cret"}}})
	in := newObject(t, dir, "/in", imageBytes)
	out := newObject(t, dir, "/out", 4*classes)
	images := randomImages(21, 1)
	in.writeFloats(0, images)
	want := bits(f.inProcess(t, images))
	const refused = `the shared-memory API is restricted on this server: expecting header "shm-key"`
	for _, header := range []map[string]string{nil, {"shm-key": "wrong"}, {"Shm-Key": "s3cre"}, {"other": "s3cret"}} {
		for name, c := range f.callers(t, header) {
			t.Run(fmt.Sprintf("%v/%s", header, name), func(t *testing.T) {
				tr := transportOf(name)
				assertAnswer(t, tr, c.RegisterSystemSharedMemory(c.ctx, "in", "/in", 0, imageBytes), http.StatusForbidden, codes.PermissionDenied, refused)
				_, err := c.SystemSharedMemoryStatus(c.ctx, "")
				assertAnswer(t, tr, err, http.StatusForbidden, codes.PermissionDenied, refused)
				assertAnswer(t, tr, c.UnregisterSystemSharedMemory(c.ctx, ""), http.StatusForbidden, codes.PermissionDenied, refused)
				_, err = c.Infer(c.ctx, regionRequest("in", "out", 0))
				assertAnswer(t, tr, err, http.StatusForbidden, codes.PermissionDenied, refused)
				_, err = c.Infer(c.ctx, &client.InferRequest{Model: "resnet18", Inputs: []client.Tensor{client.FP32("input", []int64{1, 3, side, side}, images)}})
				assert.NoError(t, err, "a request without regions")
			})
		}
	}
	grpcTriton := f.callers(t, map[string]string{"triton-grpc-protocol-shm-key": "s3cret"})
	delete(grpcTriton, "http")
	for header, callers := range map[string]map[string]caller{"shm-key": f.callers(t, map[string]string{"SHM-KEY": "s3cret"}), "triton-grpc-protocol-shm-key": grpcTriton} {
		for name, c := range callers {
			t.Run(header+"/"+name, func(t *testing.T) {
				require.NoError(t, c.RegisterSystemSharedMemory(c.ctx, "in", "/in", 0, imageBytes))
				require.NoError(t, c.RegisterSystemSharedMemory(c.ctx, "out", "/out", 0, 4*classes))
				st, err := c.SystemSharedMemoryStatus(c.ctx, "")
				require.NoError(t, err)
				assert.Len(t, st, 2)
				_, err = c.Infer(c.ctx, regionRequest("in", "out", 0))
				require.NoError(t, err)
				assert.Equal(t, want, bits(out.readFloats(0, classes)))
				require.NoError(t, c.UnregisterSystemSharedMemory(c.ctx, ""))
			})
		}
	}
}

// TestSharedMemoryNamespaces: a client cannot see, use or unregister the
// regions of another namespace, nor map an object another namespace maps;
// two namespaces may each have a region of one name.
func TestSharedMemoryNamespaces(t *testing.T) {
	f, dir := shmFixture(t, fixtureOpts{})
	objs := map[string]*object{}
	for _, k := range []string{"a-in", "a-out", "b-in", "b-out"} {
		objs[k] = newObject(t, dir, "/"+k, map[bool]int{true: imageBytes, false: 4 * classes}[strings.HasSuffix(k, "in")])
	}
	imagesA, imagesB := randomImages(31, 1), randomImages(32, 1)
	objs["a-in"].writeFloats(0, imagesA)
	objs["b-in"].writeFloats(0, imagesB)
	wantA, wantB := bits(f.inProcess(t, imagesA)), bits(f.inProcess(t, imagesB))
	as := f.callers(t, map[string]string{protocol.NamespaceHeader: "a"})
	bs := f.callers(t, map[string]string{protocol.NamespaceHeader: "b"})
	nobody := f.callers(t, nil)
	for name, a := range as {
		t.Run(name, func(t *testing.T) {
			tr := transportOf(name)
			b, anon := bs[name], nobody[name]
			require.NoError(t, a.RegisterSystemSharedMemory(a.ctx, "in", "/a-in", 0, imageBytes))
			require.NoError(t, a.RegisterSystemSharedMemory(a.ctx, "out", "/a-out", 0, 4*classes))
			defer func() { require.NoError(t, a.UnregisterSystemSharedMemory(a.ctx, "")) }()

			for who, c := range map[string]caller{"b": b, "no namespace": anon} {
				st, err := c.SystemSharedMemoryStatus(c.ctx, "")
				require.NoError(t, err, who)
				assert.Empty(t, st, "%s lists a's regions", who)
				_, err = c.SystemSharedMemoryStatus(c.ctx, "in")
				assertAnswer(t, tr, err, http.StatusNotFound, codes.NotFound, `unknown system shared-memory region "in"`)
				_, err = c.Infer(c.ctx, regionRequest("in", "out", 0))
				assertAnswer(t, tr, err, http.StatusNotFound, codes.NotFound, `unknown shared-memory region "in"`)
				require.NoError(t, c.UnregisterSystemSharedMemory(c.ctx, "in"), who)
				require.NoError(t, c.UnregisterSystemSharedMemory(c.ctx, ""), who)
				assertAnswer(t, tr, c.RegisterSystemSharedMemory(c.ctx, "mine", "/a-out", 0, 4*classes), http.StatusForbidden, codes.PermissionDenied,
					`object "/a-out" is mapped by a region of another namespace`)
			}
			st, err := a.SystemSharedMemoryStatus(a.ctx, "")
			require.NoError(t, err)
			assert.Len(t, st, 2, "a's regions outlive the others' unregister calls")

			// b's regions of the same names are b's own.
			require.NoError(t, b.RegisterSystemSharedMemory(b.ctx, "in", "/b-in", 0, imageBytes))
			require.NoError(t, b.RegisterSystemSharedMemory(b.ctx, "out", "/b-out", 0, 4*classes))
			_, err = b.Infer(b.ctx, regionRequest("in", "out", 0))
			require.NoError(t, err)
			_, err = a.Infer(a.ctx, regionRequest("in", "out", 0))
			require.NoError(t, err)
			assert.Equal(t, wantA, bits(objs["a-out"].readFloats(0, classes)))
			assert.Equal(t, wantB, bits(objs["b-out"].readFloats(0, classes)))
			require.NoError(t, b.UnregisterSystemSharedMemory(b.ctx, ""))
		})
	}
	long := f.callers(t, map[string]string{protocol.NamespaceHeader: strings.Repeat("n", protocol.MaxNamespaceBytes+1)})
	for name, c := range long {
		_, err := c.SystemSharedMemoryStatus(c.ctx, "")
		assertAnswer(t, transportOf(name), err, http.StatusBadRequest, codes.InvalidArgument, "header inferbench-shm-namespace: 256 bytes, want at most 255")
	}
}

func TestParseRequiredHeader(t *testing.T) {
	for _, tt := range []struct {
		in, name, value, err string
	}{
		{in: "shm-key=s3cret", name: "shm-key", value: "s3cret"},
		{in: "Admin_Key.1=a b=c", name: "admin_key.1", value: "a b=c"},
		{in: "novalue", err: "want name=value"},
		{in: "=v", err: "want name=value"},
		{in: "bad:name=v", err: "want name=value"},
		{in: "grpc-timeout=1", err: "not grpc-*"},
		{in: "token-bin=1", err: "*-bin"},
		{in: protocol.NamespaceHeader + "=x", err: "inferbench-shm-namespace"},
		{in: "k=", err: "1 to 1024 printable ASCII"},
		{in: "k=tab\there", err: "1 to 1024 printable ASCII"},
		{in: "k=" + strings.Repeat("v", 1025), err: "1 to 1024 printable ASCII"},
	} {
		name, value, err := protocol.ParseRequiredHeader(tt.in)
		if tt.err != "" {
			assert.ErrorContains(t, err, tt.err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, [2]string{tt.name, tt.value}, [2]string{name, value}, tt.in)
	}
}
