package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/crimux/crimux/internal/errdefs"
)

type loggerKey struct{}

// Observer sees every finished call: metrics hook in here.
type Observer func(method string, d time.Duration, err error)

// UnaryInterceptor gives each call a request ID and a logger carrying it,
// translates errors to gRPC codes (errdefs.ToGRPC, the one place this is
// done) and logs the outcome: failures at warn, the rest at debug.
func UnaryInterceptor(log *slog.Logger, observe Observer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		l := callLogger(ctx, log, info.FullMethod)
		resp, err := handler(context.WithValue(ctx, loggerKey{}, l), req)
		err = errdefs.ToGRPC(err)
		finish(ctx, l, info.FullMethod, start, err)
		if observe != nil {
			observe(info.FullMethod, time.Since(start), err)
		}
		return resp, err
	}
}

// StreamInterceptor does the same for streaming calls.
func StreamInterceptor(log *slog.Logger, observe Observer) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		l := callLogger(ss.Context(), log, info.FullMethod)
		err := handler(srv, &loggedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), loggerKey{}, l)})
		err = errdefs.ToGRPC(err)
		finish(ss.Context(), l, info.FullMethod, start, err)
		if observe != nil {
			observe(info.FullMethod, time.Since(start), err)
		}
		return err
	}
}

// callLogger is the logger of one call. With debug logging it carries the
// method and a request ID on every line; without, it is log itself: a
// logger's With formats its attributes at once, which cost a measurable
// share of crimux's CPU per proxied call (docs/benchmarks.md), for lines
// that are then never written. finish names the method on its own.
func callLogger(ctx context.Context, log *slog.Logger, method string) *slog.Logger {
	if !log.Enabled(ctx, slog.LevelDebug) {
		return log
	}
	return log.With("rpc", method, "req", requestID())
}

func finish(ctx context.Context, l *slog.Logger, method string, start time.Time, err error) {
	if err != nil {
		attrs := []slog.Attr{slog.Duration("took", time.Since(start)),
			slog.String("code", errdefs.Code(err).String()), slog.String("err", err.Error())}
		if !l.Enabled(ctx, slog.LevelDebug) { // the logger does not name the call
			attrs = append([]slog.Attr{slog.String("rpc", method)}, attrs...)
		}
		l.LogAttrs(ctx, slog.LevelWarn, "call failed", attrs...)
		return
	}
	l.LogAttrs(ctx, slog.LevelDebug, "call done", slog.Duration("took", time.Since(start)))
}

type loggedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *loggedStream) Context() context.Context { return s.ctx }

func requestID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
