// Package agent runs commands in a VM's guest through the QEMU guest
// agent (qemu-guest-agent in the guest, on the virtio-serial channel
// org.qemu.guest_agent.0 every crimux domain has). libvirt carries the
// agent's JSON protocol (virDomainQemuAgentCommand); this package builds
// the requests with encoding/json, never by formatting strings, and reads
// the answers: guest-exec starts a process with its output captured,
// guest-exec-status is polled until it has exited.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
)

// Send sends one agent command (JSON) and returns the agent's answer
// (JSON), waiting at most timeout for it.
type Send func(cmd string, timeout time.Duration) (string, error)

// SendTo is the Send of domain d's agent through a (virt.Libvirt's
// AgentCommand); generic so that this package needs nothing of virt.
func SendTo[D any](a interface {
	AgentCommand(d D, cmd string, timeout time.Duration) (string, error)
}, d D) Send {
	return func(cmd string, timeout time.Duration) (string, error) { return a.AgentCommand(d, cmd, timeout) }
}

// Result is a finished command.
type Result struct {
	ExitCode       int32
	Stdout, Stderr []byte
	// Truncated: the agent kept only the start of the output.
	Truncated bool
}

// Bounds of one exec.
const (
	// callTimeout bounds one agent call: an agent that does not answer
	// (none installed, not started yet) is Unavailable quickly, not a hang.
	callTimeout = 5 * time.Second
	pollEvery   = 100 * time.Millisecond
	pollMax     = time.Second
)

// ErrTimedOut: the command did not finish within the caller's deadline
// (it is left running in the guest: the agent cannot stop it).
var ErrTimedOut = errors.New("command timed out in the guest")

type execArgs struct {
	Path          string   `json:"path"`
	Arg           []string `json:"arg,omitempty"`
	InputData     []byte   `json:"input-data,omitempty"` // base64 in JSON
	CaptureOutput bool     `json:"capture-output"`
}

// MaxInput bounds the stdin one exec hands the guest: the agent takes it
// in one message.
const MaxInput = 1 << 20

type statusArgs struct {
	PID int64 `json:"pid"`
}

type request[T any] struct {
	Execute   string `json:"execute"`
	Arguments T      `json:"arguments"`
}

type execReply struct {
	Return struct {
		PID int64 `json:"pid"`
	} `json:"return"`
}

type statusReply struct {
	Return struct {
		Exited   bool   `json:"exited"`
		ExitCode int32  `json:"exitcode"`
		Signal   int32  `json:"signal"`
		OutData  []byte `json:"out-data"` // base64 in JSON
		ErrData  []byte `json:"err-data"`
		OutTrunc bool   `json:"out-truncated"`
		ErrTrunc bool   `json:"err-truncated"`
	} `json:"return"`
}

// Exec runs argv in the guest and waits for it until ctx ends. An exec
// whose start is refused by the caps of agent calls in flight
// (ResourceExhausted) starts nothing. One refused because the caps are
// busy with calls that are answered (errdefs.ErrBusy: the node's cap, or
// its VM's while its agent answers) asks again until ctx ends: a kubectl
// exec or an exec probe would rather wait its turn than fail (a failed
// probe restarts the pod), and the waiting is in crimux, never in
// libvirtd's workers. A VM whose agent does not answer is refused within
// seconds, naming its cap.
func Exec(ctx context.Context, send Send, argv []string) (Result, error) {
	return ExecInput(ctx, send, argv, nil)
}

// ExecInput is Exec with stdin: the agent gives the process input as its
// standard input, then end of file. Its output comes back when it exits
// (the agent keeps it until then).
func ExecInput(ctx context.Context, send Send, argv []string, input []byte) (Result, error) {
	return ExecPolling(ctx, send, argv, input, pollEvery)
}

// ExecPolling is ExecInput asking for the command's status every first
// (then less often, up to a second): a short command whose end someone
// waits for (a clone's identity) is asked for more often than an exec's.
func ExecPolling(ctx context.Context, send Send, argv []string, input []byte, first time.Duration) (Result, error) {
	if len(input) > MaxInput {
		return Result{}, errdefs.Invalid("stdin", "is %d bytes, more than the %d a VM exec takes", len(input), MaxInput)
	}
	if len(argv) == 0 || argv[0] == "" {
		return Result{}, errdefs.Invalid("cmd", "must name a command")
	}
	pid, err := startWhenFree(ctx, send, argv, input)
	if err != nil {
		return Result{}, err
	}
	every := first
	tick := time.NewTimer(every)
	defer tick.Stop()
	for {
		res, done, err := status(send, pid)
		if errors.Is(err, errdefs.ErrResourceExhausted) {
			// The caps of agent calls in flight were full for this poll:
			// the command runs in the guest, so poll again rather than
			// lose its result (the start is what gets refused).
			done, err = false, nil
		}
		if err != nil || done {
			return res, err
		}
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("%s (pid %d): %w", argv[0], pid, ErrTimedOut)
		case <-tick.C:
		}
		// A long command is asked less and less often (up to pollMax):
		// each poll is an agent call, and many execs polling at once
		// fill the caps of calls in flight.
		every = min(every*3/2, pollMax)
		tick.Reset(every)
	}
}

// startWhenFree starts argv, asking again while a busy cap refuses it
// (each refusal has waited for a slot already) and ctx lives.
func startWhenFree(ctx context.Context, send Send, argv []string, input []byte) (int64, error) {
	for {
		pid, err := start(send, argv, input)
		if !errors.Is(err, errdefs.ErrBusy) {
			return pid, err
		}
		select { // a pause, should a refusal ever come without its wait
		case <-ctx.Done():
			return pid, err
		case <-time.After(busyPause):
		}
	}
}

// busyPause is the pause between two starts a busy cap refused.
const busyPause = 20 * time.Millisecond

func start(send Send, argv []string, input []byte) (int64, error) {
	var reply execReply
	if err := call(send, request[execArgs]{Execute: "guest-exec",
		Arguments: execArgs{Path: argv[0], Arg: argv[1:], InputData: input, CaptureOutput: true}}, &reply); err != nil {
		return 0, fmt.Errorf("start %s in the guest: %w", argv[0], err)
	}
	return reply.Return.PID, nil
}

func status(send Send, pid int64) (Result, bool, error) {
	var reply statusReply
	if err := call(send, request[statusArgs]{Execute: "guest-exec-status", Arguments: statusArgs{PID: pid}}, &reply); err != nil {
		return Result{}, false, fmt.Errorf("status of guest pid %d: %w", pid, err)
	}
	r := reply.Return
	if !r.Exited {
		return Result{}, false, nil
	}
	code := r.ExitCode
	if r.Signal != 0 {
		code = 128 + r.Signal // as a shell reports a killed command
	}
	return Result{ExitCode: code, Stdout: r.OutData, Stderr: r.ErrData, Truncated: r.OutTrunc || r.ErrTrunc}, true, nil
}

// call marshals req, sends it and decodes the answer into reply.
func call(send Send, req any, reply any) error {
	cmd, err := json.Marshal(req)
	if err != nil {
		return err
	}
	answer, err := send(string(cmd), callTimeout)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(answer), reply); err != nil {
		return fmt.Errorf("the guest agent answered %q: %v: %w", truncate(answer), err, errdefs.ErrUnavailable)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// Wait asks the guest agent until it answers a ping or ctx ends: a
// booting template's, a restored clone's, a VM's just arrived by live
// migration (its agent's channel reconnects on the new node).
func Wait(ctx context.Context, send Send, every time.Duration) error {
	var last error
	for {
		_, err := send(`{"execute":"guest-ping"}`, 2*time.Second)
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("its guest agent did not answer before %w: %v", ctx.Err(), last)
		case <-time.After(every):
		}
	}
}
