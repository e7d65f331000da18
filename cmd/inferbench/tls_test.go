package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inferbench/inferbench/inference/client"
)

// testPKI writes a CA and a server certificate for 127.0.0.1 and
// localhost signed by it, as PEM files in dir.
func testPKI(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "inferbench test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key := newKey()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "inferbench test server"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600))
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", der), write("key.pem", "PRIVATE KEY", keyDER)
}

// TestServeOverTLS (issue 35, item 8): with -tls-cert and -tls-key, health
// and inference are answered over HTTPS and gRPC over TLS (both gRPC
// servers, every client transport) to a client trusting the CA, and a
// plaintext client is refused.
func TestServeOverTLS(t *testing.T) {
	ca, cert, key := testPKI(t, t.TempDir())
	trust, err := client.LoadCA(ca)
	require.NoError(t, err)
	const side = 32
	images := make([]float32, 3*side*side)
	req := &client.InferRequest{Model: "tiny", Inputs: []client.Tensor{client.FP32("input", []int64{1, 3, side, side}, images)}}
	for _, impl := range []string{"h2grpc", "grpc-go"} {
		t.Run(impl, func(t *testing.T) {
			s := startServer(t, "-backend", "nop", "-model", "tiny", "-size", "32x32", "-max-batch", "4",
				"-grpc-server", impl, "-tls-cert", cert, "-tls-key", key)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			hc, err := client.NewHTTP("https://"+s.http, client.HTTPOptions{TLS: trust})
			require.NoError(t, err)
			defer hc.Close()
			clients := map[string]client.Client{"https": hc}
			for _, o := range []client.GRPCOptions{
				{TLS: trust, Transport: client.TransportH2},
				{TLS: trust, Transport: client.TransportGRPCGo},
				{TLS: trust, Stream: true},
			} {
				gc, err := client.NewGRPC(s.grpc, o)
				require.NoError(t, err)
				defer gc.Close()
				clients["grpc "+o.Transport+map[bool]string{true: " stream"}[o.Stream]] = gc
			}
			for name, c := range clients {
				live, err := c.Live(ctx)
				require.NoError(t, err, name)
				assert.True(t, live, name)
				ready, err := c.Ready(ctx)
				require.NoError(t, err, name)
				assert.True(t, ready, name)
				r, err := c.Infer(ctx, req)
				require.NoError(t, err, name)
				out, err := r.Output("logits")
				require.NoError(t, err, name)
				assert.NotEmpty(t, out.Data, name)
			}

			cc, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(trust)))
			require.NoError(t, err)
			defer cc.Close()
			h, err := grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
			require.NoError(t, err)
			assert.Equal(t, grpc_health_v1.HealthCheckResponse_SERVING, h.GetStatus())

			// The connection speaks TLS 1.2 or later, h2 for gRPC.
			conn, err := tls.Dial("tcp", s.grpc, &tls.Config{RootCAs: trust.RootCAs, NextProtos: []string{"h2"}, MaxVersion: tls.VersionTLS11})
			if err == nil {
				conn.Close()
			}
			assert.Error(t, err, "TLS 1.1 refused")
			conn, err = tls.Dial("tcp", s.grpc, &tls.Config{RootCAs: trust.RootCAs, NextProtos: []string{"h2"}})
			require.NoError(t, err)
			assert.Equal(t, "h2", conn.ConnectionState().NegotiatedProtocol)
			conn.Close()

			plain, err := client.NewHTTP("http://"+s.http, client.HTTPOptions{})
			require.NoError(t, err)
			defer plain.Close()
			live, err := plain.Live(ctx)
			assert.False(t, err == nil && live, "plaintext HTTP to the TLS port is refused (Go answers 400)")
		})
	}
}

// TestTLSFlagsMustPair: one of -tls-cert and -tls-key without the other,
// or a pair that does not load, is a usage error (exit 2) naming the
// flags, before any model is built.
func TestTLSFlagsMustPair(t *testing.T) {
	dir := t.TempDir()
	_, cert, key := testPKI(t, dir)
	junk := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("not PEM"), 0o600))
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-tls-cert", cert}, "without -tls-key: give both or neither"},
		{[]string{"-tls-key", key}, "without -tls-cert: give both or neither"},
		{[]string{"-tls-cert", key, "-tls-key", cert}, "-tls-cert"},
		{[]string{"-tls-cert", junk, "-tls-key", key}, "-tls-cert"},
		{[]string{"-tls-cert", filepath.Join(dir, "missing.pem"), "-tls-key", key}, "missing.pem"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"serve", "-model", "tiny", "-size", "32x32"}, tc.args...), &out, &errOut)
		assert.Equal(t, 2, exitCode(err, &errOut), "%v: exit status", tc.args)
		assert.Contains(t, errOut.String(), tc.msg, "%v", tc.args)
		assert.NotContains(t, errOut.String(), "warm-up", "%v: the model was built", tc.args)
	}
	f, err := parseServe([]string{"-tls-cert", cert, "-tls-key", key}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.NotNil(t, f.tlsCert)
	cfg := f.tlsConfig("h2")
	assert.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion)
	assert.Equal(t, []string{"h2"}, cfg.NextProtos)
}
