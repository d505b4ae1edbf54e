package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/crimux/crimux/controller/vmmigration"
	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// migrate is a thin client of the VMMigration object (kubeapi/
// vmmigration.go): it creates one, which crimux's controller carries out,
// and follows its status; --cancel sets spec.cancel on the pod's
// migrations under way. Whatever the plugin does, the migration is the
// controller's: it goes on when the plugin stops following it.

// controllerHintAfter is how long a migration may have no status before
// the plugin asks whether crimux's controller runs.
var controllerHintAfter = 10 * time.Second

// followRetry is the wait before the plugin reads a migration again after
// a failed read or watch.
const followRetry = 500 * time.Millisecond

// migrateCommand runs kubectl crimux migrate POD [--to NODE] and migrate
// POD --cancel.
func migrateCommand(in invocation, args []string) error {
	switch {
	case len(args) != 1:
		return fmt.Errorf("migrate takes one pod, got %d arguments: kubectl crimux migrate POD [--to NODE], or migrate POD --cancel", len(args))
	case in.o.cancel && in.o.to != "":
		return errors.New("migrate --cancel takes no --to: it cancels the pod's migrations under way, wherever they go")
	}
	c, ns, err := in.client(in.o)
	if err != nil {
		return err
	}
	// o.timeout is defaultMigrateTimeout unless --timeout sets it.
	ctx, cancel := context.WithTimeout(in.ctx, in.o.timeout)
	defer cancel()
	mc := migrateCmd{in: in, c: c, ns: ns, pod: args[0], res: c.dyn.Resource(vmmigration.GVR).Namespace(ns)}
	if in.o.cancel {
		return mc.cancel(ctx)
	}
	return mc.start(ctx)
}

// migrateCmd is one run of migrate, on pod ns/pod.
type migrateCmd struct {
	in      invocation
	c       clients
	ns, pod string
	res     dynamic.ResourceInterface // the namespace's VMMigrations
}

// start creates a migration of the pod and follows it to its end.
func (mc migrateCmd) start(ctx context.Context) error {
	// A typo should not leave a migration behind that can only fail.
	if _, err := mc.c.kube.CoreV1().Pods(mc.ns).Get(ctx, mc.pod, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Errorf("pod %s/%s: %w", mc.ns, mc.pod, err)
	}
	if under, err := mc.underWay(ctx); err == nil && len(under) > 0 {
		m := under[0]
		return fmt.Errorf("migration %s/%s of pod %s is under way already (%s): follow it: %s; cancel it: %s",
			mc.ns, m.Name, mc.pod, phaseOr(m.Status.Phase), mc.followHint(m.Name), mc.cancelHint())
	}
	m, err := mc.create(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(mc.in.stdout, "created VMMigration %s/%s of pod %s\n", mc.ns, m.Name, mc.pod)
	m, err = mc.follow(ctx, m.Name)
	if err != nil {
		return mc.stopped(ctx, m, err, false)
	}
	return mc.outcome(m, false)
}

// create creates the migration, named as generateName "POD-" would name
// it (the name is set here, so that a name taken is tried again).
func (mc migrateCmd) create(ctx context.Context) (*kubeapi.VMMigration, error) {
	for attempt := 0; ; attempt++ {
		m := &kubeapi.VMMigration{
			ObjectMeta: metav1.ObjectMeta{Name: migrationName(mc.pod), Namespace: mc.ns},
			Spec:       kubeapi.VMMigrationSpec{Pod: mc.pod, TargetNode: mc.in.o.to},
		}
		u, err := vmmigration.ToUnstructured(m)
		if err != nil {
			return nil, err
		}
		unstructured.RemoveNestedField(u.Object, "status")
		out, err := mc.res.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager})
		switch {
		case apierrors.IsAlreadyExists(err) && attempt < 3:
			continue
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("create VMMigration in %s: %w (is crimux's controller installed, with its CRD deploy/controller/crd-vmmigration.yaml?)", mc.ns, err)
		case err != nil:
			return nil, fmt.Errorf("create VMMigration in %s: %w", mc.ns, err)
		}
		return vmmigration.FromUnstructured(out)
	}
}

// migrationName is "POD-xxxxx", as the API server makes generateName
// "POD-" into a name: the base cut to 58 characters, then 5 random ones
// (of [a-z0-9]). The controller puts the name in a label of the target
// pod, so it must not pass 63 characters.
func migrationName(pod string) string { return kubeclient.RandomName(pod + "-") }

// cancel sets spec.cancel on the pod's migrations under way and follows
// each to its end.
func (mc migrateCmd) cancel(ctx context.Context) error {
	under, err := mc.underWay(ctx)
	if err != nil {
		return err
	}
	if len(under) == 0 {
		return fmt.Errorf("no migration of pod %s/%s is under way", mc.ns, mc.pod)
	}
	for _, m := range under {
		if err := mc.setCancel(ctx, m.Name); err != nil {
			return fmt.Errorf("cancel migration %s/%s: %w", mc.ns, m.Name, err)
		}
		fmt.Fprintf(mc.in.stdout, "cancelling VMMigration %s/%s of pod %s (%s)\n", mc.ns, m.Name, mc.pod, phaseOr(m.Status.Phase))
	}
	var failed bool
	for _, m := range under {
		end, err := mc.follow(ctx, m.Name)
		if err != nil {
			return mc.stopped(ctx, end, err, true)
		}
		if err := mc.outcome(end, true); err != nil {
			failed = true
		}
	}
	if failed {
		return errReported
	}
	return nil
}

// underWay is the pod's migrations that have not ended, oldest first.
// It lists the namespace's alone: a user may read no other's.
func (mc migrateCmd) underWay(ctx context.Context) ([]*kubeapi.VMMigration, error) {
	l, err := mc.res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list VMMigrations in %s: %w", mc.ns, err)
	}
	var out []*kubeapi.VMMigration
	for i := range l.Items {
		m, err := vmmigration.FromUnstructured(&l.Items[i])
		if err != nil {
			return nil, err
		}
		if m.Namespace == mc.ns && m.Spec.Pod == mc.pod && !kubeapi.Final(m.Status.Phase) {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].CreationTimestamp, out[j].CreationTimestamp; !a.Equal(&b) {
			return a.Before(&b)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// setCancel sets spec.cancel of migration name, on the latest version of
// it.
func (mc migrateCmd) setCancel(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := mc.res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, true, "spec", "cancel"); err != nil {
			return err
		}
		_, err = mc.res.Update(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
}

// outcome prints how migration m ended: nil if it succeeded, or was
// cancelled as asked (cancelling); else errReported, the failure printed.
func (mc migrateCmd) outcome(m *kubeapi.VMMigration, cancelling bool) error {
	st := m.Status
	out := mc.in.stdout
	switch {
	case st.Phase == kubeapi.VMMigrationSucceeded:
		if cancelling {
			fmt.Fprintf(out, "migration %s/%s succeeded before it could be cancelled (the VM had left pod %s)\n", mc.ns, m.Name, mc.pod)
		}
		fmt.Fprintf(out, "target pod %s runs the VM on %s\n", orUnsaid(st.TargetPod), orUnsaid(st.TargetNode))
		return nil
	case cancelling && st.Reason == "Cancelled":
		fmt.Fprintf(out, "migration %s/%s cancelled: %s\n", mc.ns, m.Name, printable(st.Message))
		return nil
	}
	fmt.Fprintf(mc.in.stderr, "kubectl-crimux: migration %s/%s failed (%s): %s\n", mc.ns, m.Name, orUnsaid(st.Reason), printable(st.Message))
	return errReported
}

// stopped reports why the plugin stopped following migration m (err):
// the command's deadline or a signal (ctx), after which the migration
// goes on in the cluster, or a read that cannot succeed.
func (mc migrateCmd) stopped(ctx context.Context, m *kubeapi.VMMigration, err error, cancelling bool) error {
	if ctx.Err() == nil {
		return err
	}
	why := fmt.Sprintf("stopped following after --timeout %s", mc.in.o.timeout)
	if mc.in.ctx.Err() != nil {
		why = "interrupted"
	}
	what := "it goes on in the cluster, carried out by crimux's controller"
	if cancelling {
		what = "its cancellation goes on in the cluster"
	}
	w := mc.in.stderr
	fmt.Fprintf(w, "kubectl-crimux: %s: migration %s/%s of pod %s is %s; %s\n", why, mc.ns, m.Name, mc.pod, phaseOr(m.Status.Phase), what)
	fmt.Fprintf(w, "  follow it: %s\n", mc.followHint(m.Name))
	if !cancelling {
		fmt.Fprintf(w, "  cancel it: %s\n", mc.cancelHint())
	}
	return errReported
}

// followHint is the kubectl command that follows migration name.
func (mc migrateCmd) followHint(name string) string {
	return "kubectl get vmmigration -n " + mc.ns + " " + name + " -w" + mc.clusterFlags()
}

// cancelHint is the command that cancels the pod's migrations.
func (mc migrateCmd) cancelHint() string {
	return "kubectl crimux migrate " + mc.pod + " --cancel -n " + mc.ns + mc.clusterFlags()
}

// clusterFlags are --kubeconfig and --context as the user gave them.
func (mc migrateCmd) clusterFlags() string {
	var b strings.Builder
	for _, f := range [][2]string{{"--kubeconfig", mc.in.o.kubeconfig}, {"--context", mc.in.o.context}} {
		if f[1] != "" {
			b.WriteString(" " + f[0] + " " + f[1])
		}
	}
	return b.String()
}
