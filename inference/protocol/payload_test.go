package protocol_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/inferbench/inferbench/inference/v2pb"
)

// payloadTransport starts a loopback server that takes size-byte messages and
// answers 4 bytes, and returns the client's send function.
func payloadTransport(b *testing.B, transport string, size int) func([]byte) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	switch transport {
	case "tcp":
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			buf := make([]byte, size)
			var hdr [8]byte
			for {
				if _, err := io.ReadFull(conn, hdr[:]); err != nil {
					return
				}
				n := binary.LittleEndian.Uint64(hdr[:])
				if _, err := io.ReadFull(conn, buf[:n]); err != nil {
					return
				}
				if _, err := conn.Write([]byte("done")); err != nil {
					return
				}
			}
		}()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		var ack [4]byte
		return func(msg []byte) error {
			var hdr [8]byte
			binary.LittleEndian.PutUint64(hdr[:], uint64(len(msg)))
			if _, err := conn.Write(hdr[:]); err != nil {
				return err
			}
			if _, err := conn.Write(msg); err != nil {
				return err
			}
			_, err := io.ReadFull(conn, ack[:])
			return err
		}
	case "http":
		buf := make([]byte, size)
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadFull(r.Body, buf[:r.ContentLength]); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			w.Write([]byte("done"))
		})}
		go hs.Serve(ln)
		b.Cleanup(func() { hs.Close() })
		hc := &http.Client{Transport: &http.Transport{WriteBufferSize: 256 << 10, ReadBufferSize: 256 << 10}}
		url := "http://" + ln.Addr().String() + "/"
		return func(msg []byte) error {
			resp, err := hc.Post(url, "application/octet-stream", bytes.NewReader(msg))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return err
		}
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(size+1<<20), grpc.InitialWindowSize(4<<20), grpc.InitialConnWindowSize(16<<20))
	v2pb.RegisterGRPCInferenceServiceServer(gs, discard{})
	go gs.Serve(ln)
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(size+1<<20)),
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(16<<20))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	api := v2pb.NewGRPCInferenceServiceClient(conn)
	return func(msg []byte) error {
		_, err := api.ModelInfer(context.Background(), &v2pb.ModelInferRequest{RawInputContents: [][]byte{msg}})
		return err
	}
}

// discard answers every ModelInfer with an empty response.
type discard struct {
	v2pb.UnimplementedGRPCInferenceServiceServer
}

func (discard) ModelInfer(context.Context, *v2pb.ModelInferRequest) (*v2pb.ModelInferResponse, error) {
	return &v2pb.ModelInferResponse{}, nil
}
