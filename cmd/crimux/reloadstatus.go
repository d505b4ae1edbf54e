package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultReloadStatusDir holds each running crimux's reload status,
// reload.<pid>: the outcome of its last reload, which `crimux reload`
// (the unit's ExecReload) waits for and reports, so that `systemctl
// reload crimux` fails when the reload did. Named by pid, not by the
// config, because the reload being reported may change the socket.
const DefaultReloadStatusDir = "/run/crimux"

// reloadStatus writes a daemon's reload outcomes.
type reloadStatus struct{ dir string }

func reloadStatusPath(dir string, pid int) string {
	return filepath.Join(dir, "reload."+strconv.Itoa(pid))
}

// record writes err's outcome (nil: ok) as one line, "<unix nanos> ok"
// or "<unix nanos> failed: <why>", replacing the last one whole.
func (s reloadStatus) record(err error, log *slog.Logger) {
	if s.dir == "" {
		return
	}
	line := fmt.Sprintf("%d ok\n", time.Now().UnixNano())
	if err != nil {
		line = fmt.Sprintf("%d failed: %s\n", time.Now().UnixNano(), strings.ReplaceAll(err.Error(), "\n", " "))
	}
	path := reloadStatusPath(s.dir, os.Getpid())
	tmp := path + ".tmp"
	werr := os.MkdirAll(s.dir, 0o755)
	if werr == nil {
		werr = os.WriteFile(tmp, []byte(line), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		log.Warn("reload status not written: crimux reload cannot tell this reload's outcome", "path", path, "err", werr)
	}
}

// remove removes the status file as the daemon ends.
func (s reloadStatus) remove() {
	if s.dir != "" {
		_ = os.Remove(reloadStatusPath(s.dir, os.Getpid()))
	}
}

// reloadCommand is `crimux reload --pid PID`: it sends the running
// crimux SIGHUP, waits for the reload's outcome and prints it; exit 0
// if the reload applied the config, 1 if it failed (the old config stays
// in force), 2 on a usage error.
func reloadCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("crimux reload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pid := fs.Int("pid", 0, "the running crimux's pid (systemd: $MAINPID)")
	dir := fs.String("status-dir", DefaultReloadStatusDir, "where the running crimux writes its reload status")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the reload's outcome")
	if err := fs.Parse(args); err != nil || *pid <= 0 || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: crimux reload --pid PID [--status-dir DIR] [--timeout D]")
		return 2
	}
	outcome, err := reloadAndWait(*pid, reloadStatusPath(*dir, *pid), *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "crimux reload: %v\n", err)
		return 1
	}
	if why, failed := strings.CutPrefix(outcome, "failed: "); failed {
		fmt.Fprintf(stderr, "crimux reload: the reload failed; the old config stays in force: %s\n", why)
		return 1
	}
	fmt.Fprintln(stdout, "crimux reload: config reloaded")
	return 0
}

// reloadAndWait sends pid SIGHUP and returns the outcome its status
// file says once it changes ("ok" or "failed: why").
func reloadAndWait(pid int, path string, timeout time.Duration) (string, error) {
	before, _ := os.ReadFile(path)
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return "", fmt.Errorf("signal crimux (pid %d): %w", pid, err)
	}
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		now, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if len(now) == 0 || bytes.Equal(now, before) {
			continue
		}
		_, outcome, _ := strings.Cut(strings.TrimSpace(string(now)), " ")
		return outcome, nil
	}
	return "", fmt.Errorf("crimux (pid %d) wrote no reload outcome to %s within %v", pid, path, timeout)
}
