package podnet

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"
)

// testLogger logs through t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func itoa(i int) string { return strconv.Itoa(i) }

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
