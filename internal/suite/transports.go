package suite

import (
	"crypto/tls"
	"errors"
	"flag"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/inferbench/inferbench/inference/client"
	"github.com/inferbench/inferbench/internal/serverflag"
)

// setTransports checks -transports, -target, -servers, -serve-bin and
// -model-name.
func (c *config) setTransports(f *settings, tf testingFlags) error {
	if f.shared.Name() == "" {
		return badFlag(serverflag.ModelName.Name, "", "give the model's name")
	}
	var err error
	if c.targets, err = parseTargets(f.targets); err != nil {
		return err
	}
	if c.targetTLS, err = targetTLS(f.targetCA, c.targets); err != nil {
		return err
	}
	if len(c.targets) > 0 {
		// A running server brings its own model and settings.
		for _, name := range []string{FlagBackends, FlagWorkers, FlagPipelines, FlagPrecisions, FlagGraphs, FlagDevices,
			serverflag.Checkpoint.Name, serverflag.Model.Name, serverflag.PinnedInput.Name, serverflag.Convs.Name, "cold", FlagServers, "serve-bin"} {
			if f.isSet(name) {
				return badFlag(name, flagSetValue(f.fs, name), "-target drives a running server, which has its own settings: give -%s or -target, not both", name)
			}
		}
	}
	allowed := []string{inproc, grpcT, httpT, grpcSHM, httpSHM, grpcCudaSHM, httpCudaSHM}
	if len(c.targets) > 0 {
		s := c.targets[0].scheme
		allowed = []string{s, s + "-shm", s + "-cudashm"}
	}
	switch {
	case f.transports == "":
		c.transports = allowed[:1]
	case len(c.targets) > 0:
		for _, tr := range list(f.transports) {
			if !slices.Contains(allowed, tr) {
				return badFlag("transports", f.transports, "a %s:// target is reached over %s, not %q", allowed[0], strings.Join(allowed, " or "), tr)
			}
		}
		c.transports = list(f.transports)
	default:
		if c.transports, err = oneOf("transports", f.transports, allowed...); err != nil {
			return err
		}
	}
	if len(c.transports) == 0 {
		return badFlag("transports", f.transports, "give at least one of %s", strings.Join(allowed, ", "))
	}
	wire := slices.ContainsFunc(c.transports, func(tr string) bool { return tr != inproc })
	for _, tr := range c.transports {
		cuda := cudaSHMTransport(tr)
		if !shmTransport(tr) && !cuda {
			continue
		}
		switch {
		case runtime.GOOS != "linux" && !cuda:
			return badFlag("transports", f.transports, "%s needs POSIX shared memory as Linux keeps it (/dev/shm)", tr)
		case cuda && suiteTags != "cuda":
			return badFlag("transports", f.transports, "%s puts tensors in the suite's GPU memory: build the suite with -tags cuda", tr)
		case cuda && len(c.targets) == 0 && tf.bench != "" && slices.ContainsFunc(c.backends, func(be string) bool { return be != "cuda" }):
			return badFlag("transports", f.transports, "%s needs -backends cuda: the server's GPU reads the suite's GPU memory", tr)
		}
		for _, t := range c.targets {
			if !t.local {
				return badFlag("transports", f.transports, "%s needs the server on this machine, and target %s is not", tr, t.url)
			}
		}
	}
	grpcTransport := slices.ContainsFunc(c.transports, func(tr string) bool { return strings.HasPrefix(tr, grpcT) })
	if f.grpcStream && !grpcTransport {
		return badFlag("grpc-stream", "true", "it changes how gRPC requests are sent: add a gRPC transport (-transports grpc, grpc-shm or grpc-cudashm, or a grpc:// target)")
	}
	if c.servers, err = positiveInts("servers", f.servers, "servers"); err != nil {
		return err
	}
	if f.isSet("servers") && len(c.servers) == 0 {
		return badFlag("servers", f.servers, "give at least one number of servers")
	}
	if c.servers != nil && !wire {
		return badFlag("servers", f.servers, "-servers starts server processes: add a wire transport (-transports grpc, http, grpc-shm, http-shm, grpc-cudashm or http-cudashm)")
	}
	if f.serveBin != "" {
		st, err := os.Stat(f.serveBin)
		if err != nil {
			return badFlag("serve-bin", f.serveBin, "%v", err)
		}
		if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			return badFlag("serve-bin", f.serveBin, "not an executable file")
		}
	} else if wire && len(c.targets) == 0 && tf.bench != "" {
		if _, err := findGo(); err != nil {
			return badFlag("serve-bin", "", "the wire transports start inferbench serve, and there is no go command here to build it (%v): "+
				"build it where Go is, go build [-tags cuda] -o .gpu/inferbench ./cmd/inferbench, carry it and give -serve-bin .gpu/inferbench "+
				"(the GPU machine has no Go toolchain)", err)
		}
	}
	return nil
}

// flagSetValue returns the value of flag name in fs.
func flagSetValue(fs *flag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// findGo returns the go command that builds the server binary.
var findGo = func() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", errors.New("no go command on PATH or in GOROOT")
}

// parseTargets checks the -target URLs: grpc:// or http:// (grpcs:// or
// https:// over TLS), host and port, all of one scheme, none twice.
func parseTargets(raw []string) ([]target, error) {
	var out []target
	for _, r := range raw {
		u, err := url.Parse(r)
		bad := func(format string, args ...any) error {
			return badFlag("target", strings.Join(raw, ","), "%q: "+format, append([]any{r}, args...)...)
		}
		if err != nil {
			return nil, bad("%v", err)
		}
		scheme, secure := strings.CutSuffix(u.Scheme, "s")
		if scheme != grpcT && scheme != httpT {
			return nil, bad("want grpc://host:port or http://host:port (grpcs:// or https:// for TLS)")
		}
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil || host == "" || port == "" {
			return nil, bad("want grpc://host:port or http://host:port, with a port")
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil || u.Fragment != "" {
			return nil, bad("want only a scheme, a host and a port")
		}
		if len(out) > 0 && (scheme != out[0].scheme || secure != out[0].tls) {
			return nil, bad("all targets must speak one protocol (%s first)", strings.TrimSuffix(out[0].url, out[0].addr))
		}
		t := target{url: u.Scheme + "://" + u.Host, scheme: scheme, addr: u.Host, local: localHost(host), tls: secure}
		if slices.ContainsFunc(out, func(o target) bool { return o.url == t.url }) {
			return nil, bad("listed twice")
		}
		out = append(out, t)
	}
	return out, nil
}

// targetTLS is the TLS configuration of grpcs:// and https:// targets:
// trusting -target-ca's certificates, not verifying with "insecure", or
// the system's roots; nil for plaintext targets.
func targetTLS(ca string, targets []target) (*tls.Config, error) {
	if len(targets) == 0 || !targets[0].tls {
		if ca != "" {
			return nil, badFlag("target-ca", ca, "give it with grpcs:// or https:// targets")
		}
		return nil, nil
	}
	switch ca {
	case "":
		return &tls.Config{MinVersion: tls.VersionTLS12}, nil
	case "insecure":
		return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}, nil
	}
	cfg, err := client.LoadCA(ca)
	if err != nil {
		return nil, badFlag("target-ca", ca, "%v", err)
	}
	return cfg, nil
}

// localHost reports whether host names this machine: localhost, a loopback
// address or an address of one of its interfaces (names are resolved).
func localHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		names, err := net.LookupHost(host)
		if err != nil {
			return false
		}
		ips = ips[:0]
		for _, n := range names {
			ips = append(ips, net.ParseIP(n))
		}
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip == nil {
			continue
		}
		if ip.IsLoopback() {
			return true
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// serverCounts returns the numbers of servers to drive at once: -servers,
// the number of -target URLs, or one.
func (c *config) serverCounts() []int {
	switch {
	case c.servers != nil:
		return c.servers
	case len(c.targets) > 0:
		return []int{len(c.targets)}
	}
	return []int{1}
}
