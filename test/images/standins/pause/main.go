// Command pause is the test bed's stand-in for the Kubernetes pause image's
// /pause: it holds the pod's namespaces, reaps orphaned children and exits 0
// on SIGINT or SIGTERM. It is built statically (CGO_ENABLED=0).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "crimux-testbed-pause"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause.go version: " + version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		default:
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", sig)
			os.Exit(0)
		}
	}
}
