// Package rawproxy is the bench's reference for the proxy hop: the least a
// gRPC proxy can do, to measure crimux against. It serves every method
// (grpc.UnknownServiceHandler), takes each request as the bytes the client
// sent, forwards them to one upstream over a single client connection and
// sends the answer back as the bytes upstream sent: no decoding, no
// routing, no interceptors, no logging. What crimux costs beyond this is
// what crimux does; what this costs over the direct path is the hop.
package rawproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
)

// Proxy is a running forwarder.
type Proxy struct {
	srv      *grpc.Server
	upstream *grpc.ClientConn
	ln       net.Listener
}

// maxMsgSize is crimux's limit too (cmd/crimux): lists of many pods.
const maxMsgSize = 16 << 20

// Start listens on the unix socket at socket and forwards every call to
// upstream (a gRPC target such as unix:///run/containerd/containerd.sock).
func Start(socket, upstream string) (*Proxy, error) {
	conn, err := grpc.NewClient(upstream, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(frameCodec{}),
			grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("rawproxy: dial %s: %w", upstream, err)
	}
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("rawproxy: %w", err)
	}
	p := &Proxy{upstream: conn, ln: ln}
	p.srv = grpc.NewServer(grpc.ForceServerCodecV2(frameCodec{}),
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.UnknownServiceHandler(p.forward))
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Addr is the proxy's gRPC target.
func (p *Proxy) Addr() string { return "unix://" + p.ln.Addr().String() }

// Close stops serving and closes the upstream connection.
func (p *Proxy) Close() {
	p.srv.Stop()
	_ = p.upstream.Close()
}

// forward relays one call: the client's request upstream, then every
// answer back until upstream ends the call. The CRI has no client-streaming
// calls (its only stream, GetContainerEvents, streams answers), so one
// request per call is all there is to forward, and doing it inline spares
// a goroutine per call: the forwarder stays the least a proxy can do.
func (p *Proxy) forward(_ any, in grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(in)
	var req frame
	if err := in.RecvMsg(&req); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	out, err := p.upstream.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		req.data.Free()
		return err
	}
	if err := out.SendMsg(&req); err != nil {
		return err
	}
	if err := out.CloseSend(); err != nil {
		return err
	}
	for {
		var answer frame
		if err := out.RecvMsg(&answer); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // upstream's status, code and message as they came
		}
		if err := in.SendMsg(&answer); err != nil {
			return err
		}
	}
}

// frame is one message as its encoded bytes.
type frame struct{ data mem.BufferSlice }

// frameCodec passes frames through; it answers to "proto" so that both
// ends see the content type they expect.
type frameCodec struct{}

func (frameCodec) Name() string { return "proto" }

// Marshal hands the frame's buffers to gRPC, which frees them once sent.
func (frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("rawproxy: cannot send %T", v)
	}
	return f.data, nil
}

// Unmarshal keeps a reference to the received buffers (gRPC frees its
// own once this returns).
func (frameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("rawproxy: cannot receive into %T", v)
	}
	data.Ref()
	f.data = data
	return nil
}
