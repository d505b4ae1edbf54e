package gc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/podnet"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
	"github.com/crimux/crimux/vmtypes"
)

// The namespace half of foreign resources (gc_foreign.go): VM pod network
// namespaces named <instance>_<sandbox ID> for another instance.

// foreignNamespaces reports the namespaces of other instances; pods names
// the foreign domain of a sandbox.
func (r *Collector) foreignNamespaces(pods map[string]string) ([]vmtypes.ForeignResource, error) {
	if r.Net == nil {
		return nil, nil
	}
	_, names, err := r.Net.Namespaces()
	if err != nil {
		return nil, fmt.Errorf("list VM pod namespaces: %w", err)
	}
	out := make([]vmtypes.ForeignResource, 0, len(names))
	for _, n := range names {
		f := vmtypes.ForeignResource{Kind: vmtypes.ForeignNetns, Name: n}
		if inst, id, err := podnet.SplitNamespace(n); err != nil {
			f.Detail = err.Error() + ": its pod is unknown"
		} else {
			f.Instance, f.Detail = inst, "sandbox "+id
			if d := pods[id]; d != "" {
				f.Detail += ", the network of domain " + d
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// adoptPodNamespace adopts the namespace of an adopted domain's pod (m
// is its metadata as it was), once the collector has taken the VM into
// the store or removed it: never while the VM runs unrecorded (the
// namespace, this crimux's and no pod's, would lose its CNI attachment).
func (r *Collector) adoptPodNamespace(l virt.Libvirt, m vm.Metadata) {
	if r.Net == nil || m.Instance == "" {
		return
	}
	name := m.Instance + "_" + m.SandboxID
	if _, foreign, err := r.Net.Namespaces(); err != nil || !slices.Contains(foreign, name) {
		return
	}
	if _, err := r.Store.Sandbox(m.SandboxID); err != nil {
		if _, err := l.Lookup(vm.DomainName(m.ContainerID)); !errdefs.IsNotFound(err) {
			r.Log.Warn("the adopted VM is not in the store yet: its pod namespace stays foreign", "netns", name)
			return
		}
	}
	if err := r.adoptForeignNetns(l, name); err != nil {
		r.Log.Warn("the adopted VM's pod namespace stays foreign", "netns", name, "err", err)
	}
}

// foreignUser names the foreign domain whose pod sandbox is id; "" if
// there is none.
func (r *Collector) foreignUser(l virt.Libvirt, id string) (string, error) {
	doms, err := l.ListAll()
	if err != nil {
		return "", fmt.Errorf("list libvirt domains: %w", err)
	}
	for _, d := range doms {
		ctr, crimux := strings.CutPrefix(d.Name, vm.DomainName(""))
		if !crimux || ctr == "" {
			continue
		}
		if owned, err := r.ownsContainer(ctr); err != nil {
			return "", err
		} else if owned {
			continue
		}
		// A domain whose metadata cannot be read may be the user: unknown
		// is never "nobody's".
		m, stamped, err := readMetadata(l, d)
		if err != nil {
			return "", fmt.Errorf("cannot tell whether domain %s uses it: %w", d.Name, err)
		}
		if stamped && m.SandboxID == id && m.Instance != r.Opts.Instance {
			return d.Name, nil
		}
	}
	return "", nil
}

// foreignNetns makes sure name is a foreign namespace crimux can act on
// and returns its sandbox ID.
func (r *Collector) foreignNetns(name string) (string, error) {
	if r.Net == nil {
		return "", fmt.Errorf("netns %q: VM pods have no pod network here (network = none): %w", name, errdefs.ErrFailedPrecondition)
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", errdefs.Invalid("name", "netns %q is not a file name in the netns dir", name)
	}
	own, foreign, err := r.Net.Namespaces()
	if err != nil {
		return "", fmt.Errorf("list VM pod namespaces: %w", err)
	}
	inst, id, splitErr := podnet.SplitNamespace(name)
	switch {
	case splitErr == nil && inst == r.Opts.Instance:
		return "", fmt.Errorf("netns %q carries this crimux's identity: not foreign: %w", name, errdefs.ErrFailedPrecondition)
	case !slices.Contains(foreign, name):
		return "", fmt.Errorf("netns %q: no namespace of another identity has this name: %w", name, errdefs.ErrNotFound)
	case splitErr != nil:
		return "", fmt.Errorf("%v: crimux cannot tell its pod; remove it by hand: %w", splitErr, errdefs.ErrFailedPrecondition)
	case own[id] != "":
		return "", fmt.Errorf("netns %q: this crimux has a namespace for sandbox %s already (%s): %w", name, id, own[id], errdefs.ErrFailedPrecondition)
	}
	return id, nil
}

// adoptForeignNetns makes a foreign namespace this crimux's. A pod of
// this crimux with its sandbox ID and no network (an adopted VM) gets it;
// the network of a VM of another identity is refused (adopting it would
// tear it down under the VM).
func (r *Collector) adoptForeignNetns(l virt.Libvirt, name string) error {
	id, err := r.foreignNetns(name)
	if err != nil {
		return err
	}
	if d, err := r.foreignUser(l, id); err != nil {
		return fmt.Errorf("netns %q: %w", name, err)
	} else if d != "" {
		return fmt.Errorf("netns %q is the network of domain %s of another identity: adopt that domain (its namespace comes with it) or delete it first: %w",
			name, d, errdefs.ErrFailedPrecondition)
	}
	defer r.Locks.Lock(id)()
	if _, err := r.Net.AdoptNamespace(name); err != nil {
		return netnsError(name, "adopt", err)
	}
	r.Log.Warn("foreign VM pod namespace adopted on an operator's command", "netns", name, "sandbox", id)
	if sb, err := r.Store.Sandbox(id); err == nil && sb.Net == nil {
		r.adoptNetwork(sb)
		return r.Store.PutSandbox(sb)
	}
	return nil
}

// deleteForeignNetns tears a foreign namespace down (CNI DEL, removal).
func (r *Collector) deleteForeignNetns(ctx context.Context, name string) error {
	id, err := r.foreignNetns(name)
	if err != nil {
		return err
	}
	if _, err := r.Store.Sandbox(id); err == nil {
		return fmt.Errorf("netns %q: sandbox %s is a pod of this crimux (CNI DEL would release its address): adopt the namespace instead: %w",
			name, id, errdefs.ErrFailedPrecondition)
	}
	defer r.Locks.Lock(id)()
	if err := r.Net.DeleteNamespace(ctx, name); err != nil {
		return netnsError(name, "delete", err)
	}
	r.Log.Warn("foreign VM pod namespace deleted on an operator's command", "netns", name, "sandbox", id)
	r.Counters.GCRemoved("foreign_netns", 1)
	return nil
}

// netnsError classifies a podnet error acting on a foreign namespace.
func netnsError(name, action string, err error) error {
	class := errdefs.ErrUnavailable // a CNI plugin failing
	switch {
	case errors.Is(err, os.ErrNotExist):
		class = errdefs.ErrNotFound
	case errors.Is(err, os.ErrExist), errors.Is(err, podnet.ErrNoConfig):
		class = errdefs.ErrFailedPrecondition
	}
	return fmt.Errorf("%s netns %q: %v: %w", action, name, err, class)
}
