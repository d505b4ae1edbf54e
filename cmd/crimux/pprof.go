package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// pprofEnv names the address (host:port, keep it on loopback) of a Go
// profiling endpoint, /debug/pprof/, for finding where crimux spends its
// time (docs/benchmarks.md). Unset: none. An environment variable, not a
// config key: it is a developer's tool, not a node setting.
const pprofEnv = "CRIMUX_PPROF_ADDRESS"

func servePprof(ctx context.Context, log *slog.Logger) {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("pprof not served", pprofEnv, addr, "err", err)
		return
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	context.AfterFunc(ctx, func() { srv.Close() })
	go func() { _ = srv.Serve(ln) }()
	log.Info("pprof serving", "address", ln.Addr().String(), "path", "/debug/pprof/")
}
