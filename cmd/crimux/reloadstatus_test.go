package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestReloadCommandReportsTheOutcome: crimux reload sends SIGHUP to the
// pid and exits with the outcome the daemon records: 0 and "config
// reloaded", or 1 and the reason (the key that cannot change).
func TestReloadCommandReportsTheOutcome(t *testing.T) {
	dir := t.TempDir()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	st := reloadStatus{dir: dir}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		err  error
		code int
		want string
	}{
		{nil, 0, "config reloaded"},
		{errors.New("listen cannot change while crimux runs"), 1, "the reload failed; the old config stays in force: listen cannot change"},
		{nil, 0, "config reloaded"},
	} {
		go func() { <-hup; st.record(tc.err, log) }()
		var out, errOut bytes.Buffer
		code := reloadCommand([]string{"--pid", strconv.Itoa(os.Getpid()), "--status-dir", dir, "--timeout", "10s"}, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.want) {
			t.Fatalf("crimux reload after a reload with error %v: exit %d, %q %q; want %d and %q", tc.err, code, out.String(), errOut.String(), tc.code, tc.want)
		}
	}
	if code := reloadCommand(nil, io.Discard, io.Discard); code != 2 {
		t.Fatalf("crimux reload without --pid: exit %d, want 2", code)
	}
}
