// Command webserver is the test bed's stand-in for the nginx and httpd
// images that critest runs. It is built statically (CGO_ENABLED=0) and
// installed as /usr/sbin/nginx or /usr/local/apache2/bin/httpd; the name it
// is installed under picks its personality:
//
//   - nginx: re-executes itself so that its command line reads
//     "nginx: master process nginx -g daemon off;" (critest looks for
//     "master process" in /proc/1/cmdline) while its process name stays
//     "nginx" (for pidof), and writes its pid to /var/run/nginx.pid.
//   - httpd: logs a line containing "httpd" and writes its pid to
//     /usr/local/apache2/logs/httpd.pid.
//
// Both serve a small page on STANDIN_LISTEN (default ":80") and exit 0 on
// SIGINT, SIGTERM or SIGQUIT. STANDIN_PID_FILE overrides the pid file's
// path (for tests on the host).
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

const masterTitle = "nginx: master process "

// The nginx personality re-executes itself at once, and an exec by a thread
// other than the thread group leader makes Linux turn the leader into a
// zombie until the exec completes (de_thread). runc calls a container whose
// init pid is a zombie stopped, so an exec arriving in that instant failed
// with "cannot exec in a stopped container" (critest's ContainerPID spec,
// which execs right after the start, failed so about once in a hundred
// runs). Locking the main goroutine to the main thread here makes main,
// and its exec, run on the leader.
func init() { runtime.LockOSThread() }

func main() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		exe = os.Args[0]
	}
	personality := filepath.Base(exe)

	log.SetFlags(0)
	var pidFile, page string
	switch personality {
	case "nginx":
		if !strings.HasPrefix(os.Args[0], masterTitle) {
			// Like nginx's setproctitle: one argv string that carries the
			// whole title. Exec the real path so /proc/PID/comm stays "nginx".
			title := masterTitle + "nginx " + strings.Join(os.Args[1:], " ")
			err := syscall.Exec(exe, []string{strings.TrimSpace(title)}, os.Environ())
			log.Fatalf("nginx: re-exec %s: %v", exe, err)
		}
		pidFile = "/var/run/nginx.pid"
		page = "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>" +
			"<body><h1>Welcome to nginx!</h1><p>crimux test bed stand-in.</p></body></html>\n"
	default:
		personality = "httpd"
		pidFile = "/usr/local/apache2/logs/httpd.pid"
		page = "<html><body><h1>It works!</h1></body></html>\n"
	}

	if f := os.Getenv("STANDIN_PID_FILE"); f != "" {
		pidFile = f
	}
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o755); err == nil {
		if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644); err != nil {
			log.Printf("%s: write pid file: %v", personality, err)
		}
	}

	addr := os.Getenv("STANDIN_LISTEN")
	if addr == "" {
		addr = ":80"
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	go func() {
		sig := <-sigs
		log.Printf("%s: got signal %v, exiting", personality, sig)
		os.Remove(pidFile)
		os.Exit(0)
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", personality+" (crimux test bed stand-in)")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	})
	log.Printf("%s: crimux test bed stand-in (pid %d) listening on %s", personality, os.Getpid(), addr)
	log.Fatal(http.ListenAndServe(addr, mux))
}
