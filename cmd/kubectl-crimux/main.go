// Command kubectl-crimux is crimux's kubectl plugin (kubectl finds it on
// PATH as the command "kubectl crimux"), as virtctl is KubeVirt's:
//
//	kubectl crimux migrate POD --to NODE [--timeout 15m] [-n NAMESPACE]
//	kubectl crimux version
//
// migrate live-migrates a running VM pod to another node: it makes the
// target pod there (POD's spec, bound to NODE, with crimux.io/migrate-from)
// and carries each node agent's answer to the other pod, as
// kubeapi/migration.go lays down, until the VM runs in the
// target pod; then it deletes POD. On any failure it deletes the target
// pod and the VM runs on in POD, unchanged.
//
// The cluster is reached as kubectl reaches it: --kubeconfig, else
// KUBECONFIG, else ~/.kube/config (else the pod's service account), with
// --context and -n/--namespace. The user needs get, list, watch, create,
// patch and delete on pods in the namespace, and get on nodes. Errors go
// to stderr, with exit code 1.
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

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crimux/crimux/internal/version"
)

const usage = `kubectl crimux: crimux's VM pods, from kubectl.

Usage:
  kubectl crimux migrate POD --to NODE [--timeout 15m] [-n NAMESPACE]
      Moves a running VM pod's VM, live (memory, disk, processes), to NODE:
      a target pod, POD-mig-xxxxx, is made there from POD's spec; once the VM
      runs in it, POD is deleted. On any failure (or Ctrl-C) the target pod
      is deleted and the VM runs on in POD, unchanged. Both nodes' crimux
      node agents must be on.
  kubectl crimux version
      kubectl-crimux's version (also --version).

Flags:
  --to NODE             the node to move the VM to (migrate)
  --timeout DURATION    deadline of the whole migration (default 15m)
  -n, --namespace NS    the pod's namespace (default: the context's)
  --kubeconfig PATH     kubeconfig file (default: $KUBECONFIG, ~/.kube/config)
  --context NAME        kubeconfig context
  -h, --help            this text
`

// errReported: what went wrong is printed already.
var errReported = errors.New("reported")

// options are the command line's flags.
type options struct {
	to, namespace, kubeconfig, context string
	timeout                            time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		// After the first signal a second one kills, as it would without
		// the plugin: the cleanup under way is then left undone.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, newClient)
	stop()
	os.Exit(code)
}

// clientFunc makes the API client and says which namespace the context
// names (tests give a fake).
type clientFunc func(o options) (kubernetes.Interface, string, error)

func run(ctx context.Context, args []string, stdout, stderr io.Writer, client clientFunc) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		args = []string{"version"}
	}
	o, pos, err := parseArgs(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "kubectl-crimux: %v\n\n%s", err, usage)
		return 1
	case len(pos) == 0:
		fmt.Fprint(stderr, usage)
		return 1
	}
	switch cmd, rest := pos[0], pos[1:]; cmd {
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version":
		fmt.Fprintf(stdout, "kubectl-crimux %s\n", version.Version)
		return 0
	case "migrate":
		err = migrateCommand(ctx, o, rest, stdout, stderr, client)
	default:
		err = fmt.Errorf("unknown command %q (want migrate or version; kubectl crimux --help)", cmd)
	}
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintf(stderr, "kubectl-crimux: %v\n", err)
		}
		return 1
	}
	return 0
}

func migrateCommand(ctx context.Context, o options, args []string, stdout, stderr io.Writer, client clientFunc) error {
	switch {
	case len(args) != 1:
		return fmt.Errorf("migrate takes one pod, got %d arguments: kubectl crimux migrate POD --to NODE", len(args))
	case o.to == "":
		return errors.New("migrate: --to NODE is required")
	case o.timeout <= 0:
		return fmt.Errorf("migrate: --timeout %s: want a positive duration", o.timeout)
	}
	c, ns, err := client(o)
	if err != nil {
		return err
	}
	m := newMigration(c, ns, args[0], o.to, o.timeout, stdout, stderr)
	return m.run(ctx)
}

// parseArgs reads the flags wherever they are ("migrate vm1 --to n2" and
// "--to n2 migrate vm1" alike; "--" ends them) and returns the rest.
func parseArgs(args []string) (options, []string, error) {
	var o options
	fs := flag.NewFlagSet("kubectl-crimux", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.to, "to", "", "")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "")
	fs.StringVar(&o.namespace, "namespace", "", "")
	fs.StringVar(&o.namespace, "n", "", "")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&o.context, "context", "", "")
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
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

// newClient reaches the cluster as kubectl does: --kubeconfig, else
// KUBECONFIG (a list of files, merged), else ~/.kube/config, else the
// in-cluster service account; --context chooses the context, whose
// namespace -n overrides.
func newClient(o options) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.context}
	overrides.Context.Namespace = o.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-crimux/" + version.Version
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}
