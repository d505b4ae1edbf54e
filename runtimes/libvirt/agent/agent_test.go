package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/crimux/crimux/internal/errdefs"
)

// fakeAgent answers guest-exec and guest-exec-status like qemu-guest-agent:
// the command "finishes" after polls status calls.
type fakeAgent struct {
	polls         int
	out, errOut   string
	code, signal  int32
	seen          []map[string]any
	failExec      error
	answerGarbage bool
}

func (f *fakeAgent) send(cmd string, _ time.Duration) (string, error) {
	var req map[string]any
	if err := json.Unmarshal([]byte(cmd), &req); err != nil {
		return "", fmt.Errorf("not JSON: %q", cmd)
	}
	f.seen = append(f.seen, req)
	switch req["execute"] {
	case "guest-exec":
		if f.failExec != nil {
			return "", f.failExec
		}
		if f.answerGarbage {
			return "not json", nil
		}
		return `{"return":{"pid":42}}`, nil
	case "guest-exec-status":
		if f.polls > 0 {
			f.polls--
			return `{"return":{"exited":false}}`, nil
		}
		return fmt.Sprintf(`{"return":{"exited":true,"exitcode":%d,"signal":%d,"out-data":%q,"err-data":%q}}`, f.code, f.signal,
			base64.StdEncoding.EncodeToString([]byte(f.out)), base64.StdEncoding.EncodeToString([]byte(f.errOut))), nil
	}
	return "", fmt.Errorf("unknown command %v", req["execute"])
}

func TestExec(t *testing.T) {
	f := &fakeAgent{polls: 2, out: "vm-1\n", errOut: "warn\n", code: 3}
	argv := []string{"sh", "-c", `echo "$(hostname)"; exit 3`}
	res, err := Exec(context.Background(), f.send, argv)
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "vm-1\n" || string(res.Stderr) != "warn\n" {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	args := f.seen[0]["arguments"].(map[string]any)
	if args["path"] != "sh" || fmt.Sprint(args["arg"]) != fmt.Sprint([]any{"-c", argv[2]}) || args["capture-output"] != true {
		t.Fatalf("guest-exec arguments %v: the command must reach the agent as it is", args)
	}
	if len(f.seen) != 4 {
		t.Fatalf("%d agent calls, want guest-exec and 3 polls", len(f.seen))
	}
}

func TestExecKilledBySignal(t *testing.T) {
	res, err := Exec(context.Background(), (&fakeAgent{signal: 9}).send, []string{"sleep", "1"})
	if err != nil || res.ExitCode != 137 {
		t.Fatalf("Exec = %+v, %v; want 137", res, err)
	}
}

func TestExecTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	_, err := Exec(ctx, (&fakeAgent{polls: 1 << 30}).send, []string{"sleep", "100"})
	if !errors.Is(err, ErrTimedOut) {
		t.Fatalf("Exec of a command that never ends: %v, want ErrTimedOut", err)
	}
}

func TestExecErrors(t *testing.T) {
	noAgent := fmt.Errorf("QEMU guest agent is not connected: %w", errdefs.ErrFailedPrecondition)
	if _, err := Exec(context.Background(), (&fakeAgent{failExec: noAgent}).send, []string{"ls"}); errdefs.Code(err) != codes.FailedPrecondition {
		t.Fatalf("no agent: %v, want FailedPrecondition", err)
	}
	if _, err := Exec(context.Background(), (&fakeAgent{answerGarbage: true}).send, []string{"ls"}); errdefs.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "not json") {
		t.Fatalf("a garbled answer: %v, want Unavailable quoting it", err)
	}
	if _, err := Exec(context.Background(), (&fakeAgent{}).send, nil); errdefs.Code(err) != codes.InvalidArgument {
		t.Fatalf("no command: %v, want InvalidArgument", err)
	}
}

// capped refuses the calls of f whose numbers (from 1) are in refuse, as
// the caps of agent calls in flight do (virt.AgentSlots).
func capped(f *fakeAgent, refuse ...int) Send {
	n := 0
	return func(cmd string, timeout time.Duration) (string, error) {
		n++
		for _, r := range refuse {
			if r == n {
				return "", fmt.Errorf("guest-agent call to crimux-c1 refused: the per-VM cap: %w", errdefs.ErrResourceExhausted)
			}
		}
		return f.send(cmd, timeout)
	}
}

// TestExecUnderTheAgentCap: an exec refused its start by the cap of
// agent calls in flight is ResourceExhausted, naming the cap, and starts
// nothing; one already started keeps polling through refused polls (the
// command runs in the guest: giving up would lose its result).
func TestExecUnderTheAgentCap(t *testing.T) {
	f := &fakeAgent{}
	_, err := Exec(context.Background(), capped(f, 1), []string{"true"})
	if errdefs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "per-VM cap") || len(f.seen) != 0 {
		t.Fatalf("an exec refused its start: %v (%s), %d calls reached the agent; want ResourceExhausted naming the cap, none", err, errdefs.Code(err), len(f.seen))
	}
	f = &fakeAgent{polls: 1, out: "done\n"}
	res, err := Exec(context.Background(), capped(f, 2, 3), []string{"echo", "done"})
	if err != nil || string(res.Stdout) != "done\n" {
		t.Fatalf("an exec whose polls were refused twice: %+v, %v; want its output", res, err)
	}
	if len(f.seen) != 3 {
		t.Fatalf("%d calls reached the agent, want guest-exec and 2 polls", len(f.seen))
	}
}

// TestExecWaitsForABusyNode: an exec whose start the node's cap refuses
// (other VMs' calls fill it) asks again until it starts, and gives up
// with the refusal once its context ends; its own VM's cap refuses at
// once (TestExecUnderTheAgentCap).
func TestExecWaitsForABusyNode(t *testing.T) {
	busy := func(f *fakeAgent, refusals int) Send {
		n := 0
		return func(cmd string, timeout time.Duration) (string, error) {
			if n++; n <= refusals {
				return "", fmt.Errorf("guest-agent call to crimux-c1 refused: the per-node cap: %w", errdefs.ErrBusy)
			}
			return f.send(cmd, timeout)
		}
	}
	f := &fakeAgent{out: "done\n"}
	res, err := Exec(context.Background(), busy(f, 3), []string{"echo", "done"})
	if err != nil || string(res.Stdout) != "done\n" || len(f.seen) != 2 {
		t.Fatalf("an exec refused 3 times by the node's cap: %+v, %v, %d calls reached the agent; want its output", res, err, len(f.seen))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	f = &fakeAgent{}
	start := time.Now()
	_, err = Exec(ctx, busy(f, 1<<30), []string{"true"})
	if errdefs.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "per-node cap") || len(f.seen) != 0 || time.Since(start) > 2*time.Second {
		t.Fatalf("an exec the node's cap refuses until its context ends: %v after %v, %d calls; want ResourceExhausted naming the cap, soon", err, time.Since(start), len(f.seen))
	}
}
