// Command kubectl-crimux is crimux's kubectl plugin (kubectl finds it on
// PATH as the command "kubectl crimux"), as virtctl is KubeVirt's:
//
//	kubectl crimux migrate POD [--to NODE] [--timeout 15m] [-n NAMESPACE]
//	kubectl crimux migrate POD --cancel [-n NAMESPACE]
//	kubectl crimux start|stop|pause|resume|hibernate|reboot POD
//	kubectl crimux snapshot [create]|restore POD NAME
//	kubectl crimux snapshot list POD
//	kubectl crimux snapshot delete POD NAME
//	kubectl crimux console POD
//	kubectl crimux version
//	kubectl crimux completion bash|zsh|fish
//
// The VM verbs set the pod's request annotation (nodeagent/doc.go) and
// wait for its node agent's answer, which they print (request.go);
// snapshot list prints the snapshots the agent lists on the pod
// (snapshot.go); console is kubectl attach -it.
//
// migrate asks for a live migration of a running VM pod: it creates a
// VMMigration object (kubeapi/vmmigration.go) in the pod's namespace,
// which crimux's controller (cmd/crimux-controller) carries out, and
// follows it, printing each step the controller records in its status
// (migrate.go). --to binds the target pod to a node; without it the
// scheduler chooses one, never the source's. migrate --cancel sets
// spec.cancel on the pod's migrations under way and follows them to
// their end. The plugin only asks and follows: a migration goes on in
// the cluster when the plugin stops following it (--timeout, Ctrl-C);
// kubectl get vmmigrations shows them all.
//
// The cluster is reached as kubectl reaches it: --kubeconfig, else
// KUBECONFIG, else ~/.kube/config (else the pod's service account), with
// --context and -n/--namespace. The VM verbs need get, list, watch and
// patch on pods in the namespace; migrate needs get on pods, and get,
// list, watch, create and update on vmmigrations.crimux.io there (the
// aggregated edit role has them). --timeout is every command's
// deadline: how long it waits at most before it gives up. Errors go to
// stderr, with exit code 1; a bad flag value is a usage error, exit code
// 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crimux/crimux/internal/version"
)

const usage = `kubectl crimux: crimux's VM pods, from kubectl.

Usage:
  kubectl crimux migrate POD [--to NODE] [--timeout 15m] [-n NAMESPACE]
      Moves a running VM pod's VM, live (memory, disk, processes), to
      another node: NODE, or without --to the one the scheduler chooses
      (never POD's). It asks crimux's controller by creating a VMMigration
      object, POD-xxxxx, and follows it, printing each step: the controller
      makes a target pod from POD's spec and, once the VM runs in it,
      deletes POD; on any failure it deletes the target pod and the VM runs
      on in POD, unchanged. The migration goes on in the cluster if the
      plugin stops following it (--timeout, Ctrl-C): kubectl get
      vmmigrations -n NAMESPACE -w follows them all. Both nodes' crimux node
      agents must be on, and crimux's controller (crimux-controller).
  kubectl crimux migrate POD --cancel [-n NAMESPACE]
      Cancels POD's migrations under way (spec.cancel) and follows them to
      their end: the controller deletes the target pod and the VM runs on
      in POD, unless it had left POD already (then the migration ends).
  kubectl crimux start|stop|pause|resume|hibernate POD
      Declares the VM's power state (crimux.io/power-state: Running,
      Shutdown, Paused, Running, Hibernate) and waits until the pod's node
      agent observes the VM in it, or says why it cannot.
  kubectl crimux reboot POD
      Reboots the guest (crimux.io/reboot-request with a new token: the
      ACPI button, a reset if it has not restarted in 30 s, the node
      agent's grace period, which --timeout does not change).
  kubectl crimux snapshot POD NAME     (also: snapshot create POD NAME)
  kubectl crimux restore POD NAME
      Takes, or goes back to, snapshot NAME of the VM (its disk, and its
      memory while it runs). Each name is done once: name a new one.
  kubectl crimux snapshot delete POD NAME
      Deletes snapshot NAME (crimux.io/snapshot-delete-request), making
      room under the VM's cap of snapshots.
  kubectl crimux snapshot list POD
      The VM's snapshots (NAME, CREATED, DESCRIPTION) as the pod's node
      agent lists them in crimux.io/snapshots: at its start, and after
      each snapshot, restore or delete. crimuxctl vm snapshot list, on
      the node, asks the VM itself.
  kubectl crimux console POD
      The VM's serial console on this terminal (kubectl attach -it).
  kubectl crimux version
      kubectl-crimux's version (also --version).
  kubectl crimux completion bash|zsh|fish
      The shell's completion script for kubectl-crimux, e.g.
      source <(kubectl crimux completion bash). For "kubectl crimux" in
      kubectl's own completion, put on the PATH an executable
      kubectl_complete-crimux that runs: kubectl-crimux __complete "$@"

--timeout is how long a command waits at most before it gives up (its
deadline). It never changes how long a guest gets to reboot or shut down
by itself: that is the node agent's (30 s). migrate stops following the
migration then, and says how to follow or cancel it: the controller goes
on with it.

Flags:
  --to NODE             the node to move the VM to (migrate; default: the
                        scheduler's choice)
  --cancel              cancel the pod's migrations under way (migrate)
  --timeout DURATION    the command's deadline: how long it waits at most
                        before it gives up, e.g. 90s, 20m (default: migrate
                        15m; the VM verbs and snapshot list 5m)
  -n, --namespace NS    the pod's namespace (default: the context's)
  --kubeconfig PATH     kubeconfig file (default: $KUBECONFIG, ~/.kube/config)
  --context NAME        kubeconfig context
  -h, --help            this text

Exit codes: 0 success, 1 the command failed, 2 a bad flag value.
`

// errReported: what went wrong is printed already.
var errReported = errors.New("reported")

// options are the command line's flags.
type options struct {
	to, namespace, kubeconfig, context string
	cancel                             bool // migrate --cancel
	timeout                            time.Duration
	timeoutSet                         bool // --timeout was given
	// badValue is a flag's value the flag set refused: a usage error.
	badValue error
}

// usageError is bad usage: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// timeoutFlag is --timeout: the command's deadline, a positive duration.
type timeoutFlag struct{ o *options }

func (f timeoutFlag) String() string {
	if f.o == nil {
		return ""
	}
	return f.o.timeout.String()
}

func (f timeoutFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		f.o.badValue = usageError{fmt.Sprintf("--timeout %q: want a positive duration, such as 90s or 20m (how long the command waits at most)", s)}
		return f.o.badValue
	}
	f.o.timeout, f.o.timeoutSet = d, true
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		// After the first signal a second one kills, as it would without
		// the plugin (which then does not say what it left under way).
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, newClient)
	stop()
	os.Exit(code)
}

// clients are the API clients: the typed one for pods, the dynamic one
// for the VMMigration objects (controller/vmmigration.Store).
type clients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

// clientFunc makes the API clients and says which namespace the context
// names (tests give fakes).
type clientFunc func(o options) (clients, string, error)

func run(ctx context.Context, args []string, stdout, stderr io.Writer, client clientFunc) int {
	if len(args) > 0 && args[0] == completeCommand {
		// The words are the command line as typed, flags and all: they
		// are completed, not parsed.
		complete(args[1:], stdout)
		return 0
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		args = []string{"version"}
	}
	o, pos, err := parseArgs(args)
	var ue usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "kubectl-crimux: %v\n\n%s", err, usage)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "kubectl-crimux: %v\n\n%s", err, usage)
		return 1
	case len(pos) == 0:
		fmt.Fprint(stderr, usage)
		return 1
	}
	if cmd, ok := lookup(pos[0]); ok {
		err = cmd.run(invocation{ctx: ctx, o: o, stdout: stdout, stderr: stderr, client: client}, pos[1:])
	} else {
		err = fmt.Errorf("unknown command %q (want %s; kubectl crimux --help)", pos[0], commandNames())
	}
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintf(stderr, "kubectl-crimux: %v\n", err)
		}
		return 1
	}
	return 0
}

// requestCommand sets a VM pod's request annotation and waits for its
// node agent's answer (request.go).
func requestCommand(ctx context.Context, o options, verb string, args []string, stdout io.Writer, client clientFunc) error {
	r, args, err := newRequest(verb, args)
	switch {
	case err != nil:
		return err
	case len(args) != 1:
		return fmt.Errorf("%s takes one pod, got %d arguments: kubectl crimux %s POD", verb, len(args), verb)
	}
	timeout := o.timeout
	if !o.timeoutSet {
		timeout = defaultRequestTimeout
	}
	c, ns, err := client(o)
	if err != nil {
		return err
	}
	return r.send(ctx, c.kube, ns, args[0], timeout, stdout)
}

// defaultRequestTimeout bounds a VM verb's wait for its answer (a
// graceful stop waits for the guest; a start boots it), unless --timeout
// sets it.
const defaultRequestTimeout = 5 * time.Minute

// defaultMigrateTimeout bounds how long migrate follows a migration,
// unless --timeout sets it.
const defaultMigrateTimeout = 15 * time.Minute

// parseArgs reads the flags wherever they are ("migrate vm1 --to n2" and
// "--to n2 migrate vm1" alike; "--" ends them) and returns the rest. A
// flag value refused is a usageError.
func parseArgs(args []string) (o options, pos []string, err error) {
	fs := newFlagSet(&o)
	for {
		if err = fs.Parse(args); err != nil {
			if o.badValue != nil {
				return o, nil, o.badValue
			}
			return o, nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return o, append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return o, pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// newFlagSet is the flags of every command, set into o.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("kubectl-crimux", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.to, "to", "", "")
	fs.BoolVar(&o.cancel, "cancel", false, "")
	o.timeout = defaultMigrateTimeout
	fs.Var(timeoutFlag{o}, "timeout", "")
	fs.StringVar(&o.namespace, "namespace", "", "")
	fs.StringVar(&o.namespace, "n", "", "")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&o.context, "context", "", "")
	return fs
}

// newClient reaches the cluster as kubectl does: --kubeconfig, else
// KUBECONFIG (a list of files, merged), else ~/.kube/config, else the
// in-cluster service account; --context chooses the context, whose
// namespace -n overrides.
func newClient(o options) (clients, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.context}
	overrides.Context.Namespace = o.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return clients{}, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return clients{}, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-crimux/" + version.Version
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return clients{}, "", err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return clients{}, "", err
	}
	return clients{kube: kube, dyn: dyn}, ns, nil
}
