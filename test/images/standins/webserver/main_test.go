package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestNginxNeverLooksStopped starts the nginx personality many times and
// watches its pid from the start until its re-exec has set the master
// title: the pid must never read as a zombie, which runc takes for a
// stopped container (an exec at that instant fails). Without the
// LockOSThread in init, a few starts in 200 showed it.
func TestNginxNeverLooksStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the stand-in 200 times")
	}
	nginx := filepath.Join(t.TempDir(), "nginx")
	build := exec.Command("go", "build", "-o", nginx, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for i := 0; i < 200; i++ {
		if state := startAndWatch(t, nginx); state != "" {
			t.Fatalf("start %d: the pid read as state %s before the master title was set", i, state)
		}
	}
}

// startAndWatch starts nginx and polls its pid until /proc/<pid>/cmdline
// shows the master title; it returns a zombie or dead state seen meanwhile.
func startAndWatch(t *testing.T, nginx string) string {
	t.Helper()
	cmd := exec.Command(nginx, "-g", "daemon off;")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "STANDIN_LISTEN=127.0.0.1:0", "STANDIN_PID_FILE="+filepath.Join(cmd.Dir, "nginx.pid"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	proc := fmt.Sprintf("/proc/%d/", cmd.Process.Pid)
	for {
		stat, err := os.ReadFile(proc + "stat")
		if err != nil {
			t.Fatalf("nginx exited before setting its title: %v", err)
		}
		s := string(stat)
		if f := strings.Fields(s[strings.LastIndex(s, ")")+1:]); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return f[0]
		}
		if cmdline, _ := os.ReadFile(proc + "cmdline"); strings.Contains(string(cmdline), masterTitle) {
			return ""
		}
	}
}
