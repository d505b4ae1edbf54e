// Command crimux-qemu-wrapper is the <emulator> of crimux's libvirt
// domains. libvirt runs it (as the qemu user, with libvirt's own cgroup
// handling off) wherever it would run qemu: for a crimux VM it first asks
// crimux's Placer, over a unix socket, to move this very process into the
// VM's cgroup under the pod's cgroup parent in every hierarchy, waits for
// "ok", and only then execs qemu — so qemu and every thread and child it
// ever makes start inside the pod, for every new qemu process libvirt
// starts (start, snapshot revert, managed-save restore). Anything else
// (libvirt's capability probes, foreign domains) execs qemu at once.
//
// The Placer's answer may hand qemu open files with arguments naming them
// (crimux's tap devices, opened in the pod's network namespace, which
// neither libvirt nor qemu can enter, with the -netdev … ,fd=N using
// them): the wrapper keeps those files open across exec and appends the
// arguments, their placeholders replaced by the files' numbers, to
// libvirt's.
//
// A crimux VM's qemu is then confined to its own VM's files with Landlock
// (confine.go) before the wrapper execs it.
//
// It never runs a crimux VM's qemu outside the pod, or without what the
// Placer hands it: when placement fails or crimux does not answer within
// the wait, it exits non-zero with the reason on stderr, which libvirt
// copies into the domain log and into the error of the start call.
//
// Build-time settings (-ldflags "-X main.name=value"): qemuBinary,
// placementSocket. At run time CRIMUX_PLACEMENT_SOCKET overrides the socket,
// but libvirt clears qemu's environment, so only tests and domains with
// <qemu:env> can use it.
package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/placement"
)

var (
	qemuBinary      = "/usr/bin/qemu-system-x86_64"
	placementSocket = placement.DefaultSocket
	// placementWait bounds the wait for crimux (a restart of crimux while
	// libvirt starts qemu must not fail the VM). A Go duration string.
	placementWait = "30s"
)

func main() {
	argv, vm, err := qemuArgv(os.Args[1:])
	if err == nil && vm {
		// On this goroutine's thread, which execs next (confine locks it).
		err = confine(argv)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "crimux-qemu-wrapper: %v\n", err)
		os.Exit(1)
	}
	err = syscall.Exec(qemuBinary, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "crimux-qemu-wrapper: exec %s: %v\n", qemuBinary, err)
	os.Exit(127)
}

// qemuArgv is qemu's argv for args (the wrapper's own, without argv[0]):
// args as they are, and for a crimux VM (vm), once placed, the arguments
// the Placer handed over after them.
func qemuArgv(args []string) (argv []string, vm bool, err error) {
	argv = append([]string{qemuBinary}, args...)
	name, ok := placement.GuestName(args)
	if !ok || !placement.IsCrimuxDomain(name) {
		return argv, false, nil
	}
	extra, err := place(name)
	if err != nil {
		return nil, true, fmt.Errorf("not starting qemu for domain %s: %w", name, err)
	}
	return append(argv, extra...), true, nil
}

// place asks the Placer to place this process as domain name and returns
// the arguments its answer hands qemu.
func place(name string) ([]string, error) {
	socket := placementSocket
	if s := os.Getenv(placement.SocketEnv); s != "" {
		socket = s
	}
	wait, err := time.ParseDuration(placementWait)
	if err != nil {
		wait = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	extra, err := placement.Request(ctx, socket, name)
	if err != nil {
		return nil, fmt.Errorf("placement into the pod's cgroup via %s: %w", socket, err)
	}
	return extra, nil
}
