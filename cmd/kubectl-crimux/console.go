package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// consoleCommand attaches the terminal to a VM pod's serial console:
// kubectl attach -it, which crimux serves from the VM's console (as
// virtctl console does over KubeVirt's).
func consoleCommand(o options, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("console takes one pod, got %d arguments: kubectl crimux console POD", len(args))
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return errors.New("console runs kubectl attach: kubectl is not on PATH")
	}
	err = syscall.Exec(kubectl, consoleArgv(o, args[0]), os.Environ())
	return fmt.Errorf("exec %s: %w", kubectl, err)
}

// consoleArgv is kubectl attach's argv for pod, with the cluster flags the
// user gave.
func consoleArgv(o options, pod string) []string {
	argv := []string{"kubectl"}
	for _, f := range [][2]string{{"--kubeconfig", o.kubeconfig}, {"--context", o.context}, {"--namespace", o.namespace}} {
		if f[1] != "" {
			argv = append(argv, f[0], f[1])
		}
	}
	return append(argv, "attach", "-i", "-t", pod)
}
