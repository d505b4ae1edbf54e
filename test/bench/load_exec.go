package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/loadgen"
)

// The load phase's exec sessions: each runs a short script in a guest
// again and again, as kubectl exec does (CRI Exec, then the streaming
// server's URL over SPDY), or through ExecSync (exec probes) with
// -load-exec-sync.

// execScript is what a session runs each time: a line out, then a
// second in the guest, so that every session has a command running in a
// guest nearly all the time.
var execScript = []string{"sh", "-c", "echo x; sleep 1"}

// execRetryAfter is how long a session waits after an exec failed (one
// refused at once would otherwise be retried in a tight loop).
const execRetryAfter = time.Second

// execLoad is what the sessions recorded: every exec's outcome, how
// long those that worked took and when they ran, and how many execs were
// asked for at once (those refused included).
type execLoad struct {
	took     loadgen.Latencies
	ran      loadgen.Spans
	outcomes loadgen.Outcomes
	inFlight loadgen.Gauge
}

// execSession is one exec of a session into the guest of container.
func (b *bench) execSession(ctx context.Context, container string, rec *execLoad) {
	defer rec.inFlight.Enter()()
	ctx, cancel := criclient.CallCtx(ctx)
	defer cancel()
	run := b.streamExec
	if b.opts.loadExecSync {
		run = b.syncExec
	}
	start := time.Now()
	stdout, err := run(ctx, container)
	if err == nil && stdout != "x\n" {
		err = fmt.Errorf("exec in %s: stdout %q, want \"x\\n\"", container, stdout)
	}
	rec.outcomes.Add(execKind(err), err)
	if err != nil {
		time.Sleep(execRetryAfter)
		return
	}
	end := time.Now()
	rec.took.Add(end.Sub(start))
	rec.ran.Add(start, end)
}

// streamExec is kubectl exec's path: Exec for the URL, then the command
// run over the streaming server (SPDY, no stdin, no TTY).
func (b *bench) streamExec(ctx context.Context, container string) (string, error) {
	resp, err := b.cri.RT.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: container, Cmd: execScript, Stdout: true, Stderr: true})
	if err != nil {
		return "", fmt.Errorf("Exec in %s: %w", container, err)
	}
	u, err := url.Parse(resp.GetUrl())
	if err != nil {
		return "", err
	}
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return "", fmt.Errorf("exec stream in %s (stderr %q): %w", container, stderr.String(), err)
	}
	return stdout.String(), nil
}

// syncExec is an exec probe's path: ExecSync.
func (b *bench) syncExec(ctx context.Context, container string) (string, error) {
	resp, err := b.cri.RT.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: container, Cmd: execScript, Timeout: int64(criclient.CallTimeout / time.Second)})
	if err != nil {
		return "", fmt.Errorf("ExecSync in %s: %w", container, err)
	}
	if resp.GetExitCode() != 0 {
		return "", utilexec.CodeExitError{Err: fmt.Errorf("exit code %d", resp.GetExitCode()), Code: int(resp.GetExitCode())}
	}
	return string(resp.GetStdout()), nil
}

// streamCodes are the errors crimux's streaming server passes on as text
// only: its message ends with the sentinel's.
var streamCodes = map[error]string{
	errdefs.ErrResourceExhausted:  "ResourceExhausted",
	errdefs.ErrFailedPrecondition: "FailedPrecondition",
	errdefs.ErrUnavailable:        "Unavailable",
	errdefs.ErrNotFound:           "NotFound",
}

// agentCapSettings are the [libvirt] lines of -agent-calls-per-vm and
// -agent-calls-per-node, none for crimux's defaults.
func (o options) agentCapSettings() []string {
	var out []string
	if o.agentCallsPerVM > 0 {
		out = append(out, fmt.Sprintf("agent_calls_per_vm = %d", o.agentCallsPerVM))
	}
	if o.agentCallsPerNode > 0 {
		out = append(out, fmt.Sprintf("agent_calls_per_node = %d", o.agentCallsPerNode))
	}
	return out
}

// execKind is loadgen.Kind, with an exit code as such and the gRPC code
// of an error the streaming server reported as text.
func execKind(err error) string {
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		return fmt.Sprintf("exit code %d", exit.ExitStatus())
	}
	kind := loadgen.Kind(err)
	if kind != "other" {
		return kind
	}
	for sentinel, code := range streamCodes {
		if strings.HasSuffix(err.Error(), ": "+sentinel.Error()) {
			return code + " (streamed)"
		}
	}
	return kind
}
