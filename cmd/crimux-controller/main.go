// Command crimux-controller is crimux's cluster-side controller: it
// carries out the cluster's VMMigration objects (controller/vmmigration)
// and moves VMs off drained nodes (controller/drain). It runs as a
// Deployment (deploy/controller) with leader election: one replica acts,
// the others wait; a new leader resumes every migration where the last
// one left it, from the objects' status.
//
//	crimux-controller [--kubeconfig PATH] [--lease-namespace crimux-system]
//	    [--max-migrations 5] [--max-migrations-per-node 2] [--migration-timeout 30m]
//	    [--eviction live-migrate] [--vm-runtime-classes vm,vm-instant]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crimux/crimux/controller/drain"
	"github.com/crimux/crimux/controller/vmmigration"
	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/kubeapi"
)

// flags are the command line.
type flags struct {
	kubeconfig, leaseNamespace, id, eviction, runtimeClasses, logFormat, metricsAddr string
	leaderElect, showVersion                                                         bool
	caps                                                                             vmmigration.Caps
	timeout, leaseDuration                                                           time.Duration
}

func parse(args []string, stderr io.Writer) (flags, error) {
	var f flags
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("crimux-controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, else $KUBECONFIG)")
	fs.StringVar(&f.leaseNamespace, "lease-namespace", "crimux-system", "namespace of the leader election's Lease (crimux-controller)")
	fs.StringVar(&f.id, "id", host, "this replica's name in the leader election")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "act only while holding the Lease (false: a single replica)")
	fs.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "how long a leader that stopped renewing holds the Lease: the wait of a new leader after one died")
	fs.IntVar(&f.caps.PerCluster, "max-migrations", vmmigration.DefaultPerCluster, "migrations under way in the cluster at once")
	fs.IntVar(&f.caps.PerNode, "max-migrations-per-node", vmmigration.DefaultPerNode, "migrations leaving one node at once")
	fs.DurationVar(&f.timeout, "migration-timeout", vmmigration.DefaultTimeout, "how long a migration may take from its start before it is failed")
	fs.StringVar(&f.eviction, "eviction", "", "eviction strategy of VM pods without "+kubeapi.AnnotationEviction+": "+
		kubeapi.EvictionLiveMigrate+", "+kubeapi.EvictionLiveMigrateOrShutdown+", or empty (Kubernetes evicts them)")
	fs.StringVar(&f.runtimeClasses, "vm-runtime-classes", "vm,vm-instant", "the RuntimeClasses of VM pods, comma-separated")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.metricsAddr, "metrics-address", "", "host:port to serve Prometheus metrics on (/metrics); empty: none")
	fs.BoolVar(&f.showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch f.eviction {
	case "", kubeapi.EvictionLiveMigrate, kubeapi.EvictionLiveMigrateOrShutdown, kubeapi.EvictionShutdown:
	default:
		return f, fmt.Errorf("--eviction %q: want %s, %s, %s or empty", f.eviction, kubeapi.EvictionLiveMigrate, kubeapi.EvictionLiveMigrateOrShutdown, kubeapi.EvictionShutdown)
	}
	if f.caps.PerCluster < 1 || f.caps.PerNode < 1 || f.timeout <= 0 || f.leaseDuration < 3*time.Second {
		return f, errors.New("--max-migrations, --max-migrations-per-node and --migration-timeout must be positive, --lease-duration at least 3s")
	}
	return f, nil
}

func main() {
	f, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "crimux-controller: %v\n", err)
		os.Exit(2)
	}
	if f.showVersion {
		fmt.Printf("crimux-controller %s\n", version.Version)
		return
	}
	log := newLogger(f.logFormat)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, log); err != nil {
		log.Error("crimux-controller stops", "err", err)
		os.Exit(1)
	}
}

func newLogger(format string) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// run builds the clients and runs the controllers, under the Lease when
// leader election is on.
func run(ctx context.Context, f flags, log *slog.Logger) error {
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "crimux-controller/" + version.Version
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	store := vmmigration.Store{Client: dyn}
	reg := prometheus.NewRegistry()
	if err := serveMetrics(ctx, f.metricsAddr, reg, log); err != nil {
		return err
	}
	mig := &vmmigration.Controller{Client: kube, Store: store, Caps: f.caps, Timing: vmmigration.Timing{Timeout: f.timeout}, Log: log,
		Metrics: vmmigration.NewMetrics(reg)}
	dr := &drain.Controller{Client: kube, Migrations: store, Eviction: f.eviction, RuntimeClasses: strings.Split(f.runtimeClasses, ","), Log: log}
	act := func(ctx context.Context) {
		log.Info("crimux-controller acting", "version", version.Version, "id", f.id)
		done := make(chan struct{})
		go func() { dr.Run(ctx); close(done) }()
		mig.Run(ctx)
		<-done
	}
	if !f.leaderElect {
		act(ctx)
		return nil
	}
	return lead(ctx, kube, f, log, act)
}

// restConfig is the API server's: --kubeconfig, else in-cluster, else
// $KUBECONFIG or ~/.kube/config.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}
