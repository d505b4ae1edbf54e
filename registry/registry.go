// Package registry owns the runtime registry: the runtimes crimux serves,
// keyed by workload type and RuntimeClass handler, the one primary runtime
// whose readiness is the node's, and the answer to the two routing
// questions: which runtime gets a new pod, and which runtime owns an ID.
//
// Routing by ID is stateless (see internal/idcodec): the primary's IDs pass
// through, every other backend's IDs carry its name as a prefix. A Registry
// is immutable once built; a config reload builds a new one and swaps it in.
//
// Beyond CRI, a backend declares its abilities by implementing small
// interfaces (Recoverer, PowerStateCounter, ImageCollector,
// ImageFsContributor, vmtypes.Operator), which callers ask for with
// Ability (abilities.go).
package registry

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/idcodec"
)

// WorkloadTypeAnnotation picks the workload type of a pod whose RuntimeClass
// handler is empty.
const WorkloadTypeAnnotation = "crimux.io/workload-type"

// Backend is a runtime's CRI surface as crimux calls it: a CRI v1 client,
// remote (containerd) or in-process.
type Backend interface {
	Runtime() runtimeapi.RuntimeServiceClient
	// Images is nil for a runtime that keeps no image store of its own.
	Images() runtimeapi.ImageServiceClient
	Close() error
}

// RawBackend is a Backend whose answers may be passed to clients as the
// bytes they came in (cri/list_raw.go): its IDs need no rewriting. RawConn
// is nil when they do.
type RawBackend interface {
	RawConn() grpc.ClientConnInterface
}

// Factory makes backends for one workload type. Runtimes whose Key is equal
// share one backend (two handlers on the same containerd, say), so lists fan
// out once per backend.
type Factory interface {
	Key(rt config.Runtime) string
	New(ctx context.Context, rt config.Runtime, codec *idcodec.Codec) (Backend, error)
}

// Runtime is one registry entry.
type Runtime struct {
	Name     string
	Type     string
	Handlers []string
	Primary  bool
	// Prefix is the ID prefix of this runtime's backend; "" for the primary's.
	Prefix  string
	Backend Backend
	// key identifies the backend's connection (type and factory key).
	key string
}

// Registry answers routing questions. Safe for concurrent use.
type Registry struct {
	runtimes  []*Runtime
	primary   *Runtime
	byHandler map[string]*Runtime
	byPrefix  map[string]*Runtime
	byType    map[string]*Runtime
	backends  []*Runtime // one runtime per distinct backend
}

// New builds the registry of cfg's runtimes with the factories of each
// workload type. cfg must have passed Validate. On error every backend
// already made is closed.
func New(ctx context.Context, cfg config.Config, factories map[string]Factory) (*Registry, error) {
	r, _, err := Rebuild(ctx, cfg, factories, nil)
	return r, err
}

// Rebuild builds the registry of cfg (a config reload), taking over the
// backends of old whose key and ID prefix are unchanged, so running pods
// are not disturbed and a runtime that holds files (the VM store) is not
// opened twice. It returns the new registry and a function closing the old
// backends not taken over, to call once calls in flight on old are done.
// On error the new backends are closed and old is untouched.
func Rebuild(ctx context.Context, cfg config.Config, factories map[string]Factory, old *Registry) (_ *Registry, closeOld func(), retErr error) {
	rb := newRebuild(old)
	defer func() {
		if retErr != nil {
			rb.closeMade()
		}
	}()
	// The primary's backend is made first so runtimes sharing it share its
	// (empty) prefix.
	ordered := append([]config.Runtime(nil), cfg.Runtimes...)
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].Primary && !ordered[j].Primary })
	for _, rc := range ordered {
		if err := rb.addRuntime(ctx, rc, factories); err != nil {
			return nil, nil, err
		}
	}
	if rb.r.primary == nil {
		return nil, nil, fmt.Errorf("runtime: no primary runtime: %w", errdefs.ErrInvalidArgument)
	}
	return rb.r, rb.closeNotTaken, nil
}

// rebuild is a registry being built by Rebuild: the old registry's
// backends it may take over (by key and prefix), the ones it took, and
// the backend of each key so far.
type rebuild struct {
	r        *Registry
	reusable map[string]*Runtime
	taken    map[*Runtime]bool
	shared   map[string]*Runtime
}

func newRebuild(old *Registry) *rebuild {
	rb := &rebuild{
		r:        &Registry{byHandler: map[string]*Runtime{}, byPrefix: map[string]*Runtime{}, byType: map[string]*Runtime{}},
		reusable: map[string]*Runtime{},
		taken:    map[*Runtime]bool{},
		shared:   map[string]*Runtime{},
	}
	if old != nil {
		for _, b := range old.backends {
			rb.reusable[b.key+"|"+b.Prefix] = b
		}
	}
	return rb
}

// addRuntime adds the runtime rc: on the backend of an earlier runtime of
// the same key, else on an old backend of the same key and prefix, else
// on a new one.
func (rb *rebuild) addRuntime(ctx context.Context, rc config.Runtime, factories map[string]Factory) error {
	f, ok := factories[rc.Type]
	if !ok {
		return fmt.Errorf("runtime %q: type %q is not available in this build: %w", rc.Name, rc.Type, errdefs.ErrInvalidArgument)
	}
	rt := &Runtime{Name: rc.Name, Type: rc.Type, Handlers: rc.Handlers, Primary: rc.Primary, key: rc.Type + "|" + f.Key(rc)}
	if owner, ok := rb.shared[rt.key]; ok {
		rt.Prefix, rt.Backend = owner.Prefix, owner.Backend
		rb.r.add(rt)
		return nil
	}
	if !rc.Primary {
		rt.Prefix = rc.Name
	}
	if prev, ok := rb.reusable[rt.key+"|"+rt.Prefix]; ok {
		rt.Backend = prev.Backend
		rb.taken[rt] = true
		delete(rb.reusable, rt.key+"|"+rt.Prefix)
	} else {
		b, err := f.New(ctx, rc, codecFor(rt.Prefix))
		if err != nil {
			return fmt.Errorf("runtime %q: %w", rc.Name, err)
		}
		rt.Backend = b
	}
	rb.shared[rt.key] = rt
	rb.r.backends = append(rb.r.backends, rt)
	if rt.Prefix != "" {
		rb.r.byPrefix[rt.Prefix] = rt
	}
	rb.r.add(rt)
	return nil
}

// closeMade closes the backends the rebuild made (not those it took
// over): the rebuild failed.
func (rb *rebuild) closeMade() {
	for _, b := range rb.r.backends {
		if !rb.taken[b] {
			b.Backend.Close()
		}
	}
}

// closeNotTaken closes the old backends the new registry did not take
// over.
func (rb *rebuild) closeNotTaken() {
	for _, b := range rb.reusable {
		b.Backend.Close()
	}
}

func codecFor(prefix string) *idcodec.Codec {
	if prefix == "" {
		return nil
	}
	c := idcodec.New(prefix)
	return &c
}

func (r *Registry) add(rt *Runtime) {
	r.runtimes = append(r.runtimes, rt)
	if rt.Primary {
		r.primary = rt
	}
	for _, h := range rt.Handlers {
		r.byHandler[h] = rt
	}
	if _, ok := r.byType[rt.Type]; !ok || rt.Primary {
		r.byType[rt.Type] = rt
	}
}

// Primary returns the primary runtime.
func (r *Registry) Primary() *Runtime { return r.primary }

// Runtimes returns every entry, primary first.
func (r *Registry) Runtimes() []*Runtime { return r.runtimes }

// Backends returns one runtime per distinct backend, primary first: the set
// a list call fans out to.
func (r *Registry) Backends() []*Runtime { return r.backends }

// ForNewPod picks the runtime of a new pod: its RuntimeClass handler first,
// then the workload-type annotation, then the primary.
func (r *Registry) ForNewPod(handler string, annotations map[string]string) (*Runtime, error) {
	if handler != "" {
		if rt, ok := r.byHandler[handler]; ok {
			return rt, nil
		}
		return nil, fmt.Errorf("runtime_handler %q: no runtime serves it (served: %s): %w",
			handler, strings.Join(r.handlerNames(), ", "), errdefs.ErrInvalidArgument)
	}
	if wt, ok := annotations[WorkloadTypeAnnotation]; ok {
		if rt, ok := r.ForType(wt); ok {
			return rt, nil
		}
		return nil, fmt.Errorf("annotation %s=%q: no runtime of that workload type is configured: %w",
			WorkloadTypeAnnotation, wt, errdefs.ErrInvalidArgument)
	}
	if rt, ok := r.byHandler[""]; ok {
		return rt, nil
	}
	return r.primary, nil
}

// ForType returns the runtime of a workload type: the primary if it is of
// that type, else the first configured; false if none is.
func (r *Registry) ForType(workloadType string) (*Runtime, bool) {
	rt, ok := r.byType[workloadType]
	return rt, ok
}

// ForHandler returns the runtime serving a RuntimeClass handler ("" is the
// primary unless another runtime claims it).
func (r *Registry) ForHandler(handler string) (*Runtime, error) {
	return r.ForNewPod(handler, nil)
}

// ForID returns the runtime owning a pod or container ID. IDs without a
// known runtime prefix belong to the primary.
func (r *Registry) ForID(id string) *Runtime {
	if prefix, _, ok := idcodec.Split(id); ok {
		if rt, ok := r.byPrefix[prefix]; ok {
			return rt
		}
	}
	return r.primary
}

// Close closes every backend once.
func (r *Registry) Close() {
	for _, rt := range r.backends {
		if rt.Backend != nil {
			rt.Backend.Close()
		}
	}
}

func (r *Registry) handlerNames() []string {
	names := make([]string, 0, len(r.byHandler))
	for h := range r.byHandler {
		names = append(names, fmt.Sprintf("%q", h))
	}
	sort.Strings(names)
	return names
}
