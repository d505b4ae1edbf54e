package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/cri"
	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/runtimes/containerd"
	"github.com/crimux/crimux/runtimes/libvirt"
)

// maxMsgSize matches kubelet's client limit.
const maxMsgSize = 16 << 20

// shutdownGrace bounds how long in-flight calls may finish on SIGTERM.
const shutdownGrace = 10 * time.Second

func run(args []string) int {
	f, fs, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	cfg, err := loadConfig(f, fs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "crimux: invalid config: %v\n", err)
		return 2
	}
	log := newLogger(cfg.LogLevel)
	if err := serve(cfg, log); err != nil {
		log.Error("crimux stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// factories are the runtime implementations of this build, by workload type.
func factories(cfg config.Config, log *slog.Logger) map[string]registry.Factory {
	return map[string]registry.Factory{
		config.TypeContainer: containerd.Factory{Defaults: cfg.Containerd},
		config.TypeVM: libvirt.Factory{
			Options: libvirt.Options{
				StateDir: cfg.StateDir, URI: cfg.Libvirt.URI, Accel: cfg.Libvirt.Accel,
				Emulator: cfg.Libvirt.Emulator, Instance: instanceID(cfg),
				MemoryOverheadMiB: cfg.Libvirt.MemoryOverheadMiB, StreamingAddr: cfg.Libvirt.StreamingAddr,
				PlacementSocket: cfg.Libvirt.PlacementSocket,
			},
			ContainerdEndpoint: cfg.Containerd.Endpoint,
			Log:                log,
		},
	}
}

// instanceID names this crimux on this node (stamped on its VMs).
func instanceID(cfg config.Config) string {
	host, _ := os.Hostname()
	return host + ":" + cfg.StateDir
}

// serve wires the registry and the CRI server, listens, and blocks until
// SIGTERM or SIGINT.
func serve(cfg config.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	reg, err := registry.New(ctx, cfg, factories(cfg, log))
	if err != nil {
		return err
	}
	defer reg.Close()
	lis, err := listen(cfg.Listen)
	if err != nil {
		return err
	}
	criServer := cri.New(reg, log)
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.ChainUnaryInterceptor(cri.UnaryInterceptor(log, nil)),
		grpc.ChainStreamInterceptor(cri.StreamInterceptor(log, nil)),
	)
	criServer.Register(g)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	log.Info("crimux serving", "version", version.Version, "listen", cfg.Listen, "runtimes", runtimeNames(reg))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	gracefulStop(g)
	return nil
}

// listen creates the unix socket 0660, replacing a stale one.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen: remove stale socket: %w", err)
	}
	old := syscall.Umask(0o117)
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return lis, nil
}

func gracefulStop(g *grpc.Server) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
		g.Stop() // long streams (events) do not hold shutdown
	}
}

func runtimeNames(reg *registry.Registry) []string {
	var names []string
	for _, rt := range reg.Runtimes() {
		names = append(names, rt.Name)
	}
	return names
}
