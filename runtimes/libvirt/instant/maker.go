package instant

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/template"
)

// FormatVersion is in every template's key: a crimux whose templates or
// clones differ from an older one's makes its own.
var FormatVersion = version.Version + "/t1"

// DefaultParent is the cgroup templates are made under.
const DefaultParent = "/crimux-templates"

// DefaultMakeTimeout bounds one making: boot, settling, saving.
const DefaultMakeTimeout = 10 * time.Minute

// The defaults of the Maker's bounds (its fields at 0).
const (
	// DefaultMaxMaking: one template VM at a time on the node.
	DefaultMaxMaking = 1
	// DefaultMaxKept: the templates kept on the state disk, any state.
	DefaultMaxKept = 8
	// DefaultRetryAfter: how long a failed template stays failed before
	// a pod or warm makes it again.
	DefaultRetryAfter = 10 * time.Minute
)

// useGrace is how long a template a pod was just planned to be restored
// from counts as in use: between the plan and its container's record
// (which then names it) nothing else says so.
const useGrace = 5 * time.Minute

// cpuPeriod is the CFS period of a template VM's CPU quota.
const cpuPeriod = 100000

// ErrBusy: the node is making as many templates as it may at once; a
// pod that would start one boots instead (no queue: a pod that booted
// waits for nothing, and the next pod of its image and shape asks again).
var ErrBusy = fmt.Errorf("the node is making another template (libvirt.template_max_making): %w", errdefs.ErrResourceExhausted)

// ErrOtherTemplate: the template at a request's key is not the
// request's template (its meta differs: a key collision, or a meta
// written by something else); it is neither used nor replaced.
var ErrOtherTemplate = errors.New("the template at its key is another's")

// Maker makes templates, one making per key at a time, at most
// MaxMaking at once on the node, and keeps at most MaxKept (Limits).
type Maker struct {
	R     Core
	Store template.Store
	// Parent is the cgroup parent of templates being made ("" is
	// DefaultParent); Timeout bounds a making (0 is DefaultMakeTimeout).
	Parent  string
	Timeout time.Duration
	// ShareAcrossNamespaces makes one template serve the pods of every
	// namespace (its key has none); false: each namespace has its own,
	// whose clones share its kernel's secrets only among themselves.
	ShareAcrossNamespaces bool
	// Limits are the bounds it starts with; SetLimits changes them
	// (read them with limits()).
	Limits Limits
	// CgroupRetry is how often the cgroup of a made template that still
	// held a process is removed again (0 is DefaultCgroupRetry); its VM
	// identity stays taken until it goes.
	CgroupRetry time.Duration
	// NIC makes a template's NIC with mac (nil: a tap alone in a network
	// namespace of its own, isolatedNIC; tests give another).
	NIC func(mac string) (open func(fd string) (*os.File, []string, error), closeNIC func(), err error)

	// Restores take turns restoring clones.
	Restores Restores

	// boot boots and saves a template (nil: bootAndSave; tests give
	// another).
	boot func(ctx context.Context, req Request, p template.Paths, key string) (int64, *store.VMIdentity, error)

	mu     sync.Mutex
	making map[string]chan struct{}
	// used is when each template was last planned for a clone.
	used map[string]time.Time

	limMu sync.Mutex
	// turns are taken by the makings under way (at most MaxMaking).
	turns turns
	// askers are the pods each background making is for.
	askers askers
	// room serializes evictions and the making of templates' directories.
	room sync.Mutex
	// vms are the template VMs being made (vms.go).
	vms vms
}

// Request is what a template is made of: an image and a shape, for the
// pods of a namespace.
type Request struct {
	Image     string
	Layout    core.ImageLayout
	Shape     template.Shape
	Namespace string
}

// namespace is the namespace req's template is for: "" when templates
// are shared.
func (m *Maker) namespace(req Request) string {
	if m.ShareAcrossNamespaces {
		return ""
	}
	return req.Namespace
}

// CheckNamespace refuses a making asked for no namespace
// (InvalidArgument, naming the field namespace) unless templates are
// shared across namespaces: each namespace has templates of its own, so
// a warm says whose pods its template serves.
func (m *Maker) CheckNamespace(namespace string) error {
	if namespace == "" && !m.ShareAcrossNamespaces {
		return errdefs.Invalid("namespace", "must name the namespace whose pods the template serves "+
			"(templates are per namespace on this node: libvirt.template_share_across_namespaces = false)")
	}
	return nil
}

// Key is the key of req's template.
func (m *Maker) Key(req Request) string {
	return template.Key(m.namespace(req), req.Layout.Digest, req.Shape, FormatVersion)
}

// mismatch says how meta differs from req's template; nil if it is it.
func (m *Maker) mismatch(meta template.Meta, req Request) error {
	if err := meta.Mismatch(m.namespace(req), req.Layout.Digest, req.Shape, FormatVersion); err != nil {
		return fmt.Errorf("%w (%w): %w", ErrOtherTemplate, err, errdefs.ErrAlreadyExists)
	}
	return nil
}

// Recover marks every template left in state making failed: the crimux
// that made it stopped (its domain is the collector's to remove).
func (m *Maker) Recover() error {
	all, err := m.Store.List()
	if err != nil {
		return err
	}
	for _, meta := range all {
		if meta.State == template.Making {
			meta.State, meta.Error, meta.FailedAt = template.Failed, "crimux stopped while it was being made", time.Now().UnixNano()
			if err := m.Store.Put(meta); err != nil {
				return err
			}
			m.R.Log.Warn("template left half made by an earlier crimux: failed", "template", meta.Key, "image", meta.Image)
		}
	}
	return nil
}

// Get is req's template as it is now: NotFound if there is none,
// ErrOtherTemplate if the one at its key is not req's in full (its
// namespace, image digest, shape and crimux version).
func (m *Maker) Get(req Request) (template.Meta, error) {
	meta, err := m.Store.Get(m.Key(req))
	if err != nil {
		return meta, err
	}
	return meta, m.mismatch(meta, req)
}

// Serves says why template key is not req's (nil if it is): checked
// again before a clone is restored from it, which may be long after its
// plan.
func (m *Maker) Serves(key string, req Request) error {
	if k := m.Key(req); k != key {
		return fmt.Errorf("%w (the clone's template is %s, its request's key %s): %w", ErrOtherTemplate, key, k, errdefs.ErrAlreadyExists)
	}
	_, err := m.Get(req)
	return err
}

// Used records that a clone was just planned from template key: it is
// then the most recently used, and kept a while (useGrace).
func (m *Maker) Used(key string) {
	m.mu.Lock()
	if m.used == nil {
		m.used = map[string]time.Time{}
	}
	m.used[key] = time.Now()
	m.mu.Unlock()
	if err := m.Store.Touch(key); err != nil {
		m.R.Log.Warn("record a template's use", "template", key, "err", err)
	}
}

// RetryIn is how long failed template meta stays failed; 0 once it may
// be made again.
func (m *Maker) RetryIn(meta template.Meta) time.Duration {
	if meta.State != template.Failed {
		return 0
	}
	at := meta.FailedAt
	if at == 0 {
		at = meta.CreatedAt
	}
	return max(time.Until(time.Unix(0, at).Add(m.limits().RetryAfter)), 0)
}

// Make makes req's template and returns it ready; a template that is
// being made is waited for, one that exists is returned as it is (a
// failed one too, until RetryAfter has passed: it is made again then).
// A making waits for a turn among MaxMaking, or ctx's end. req names its
// namespace unless templates are shared (CheckNamespace).
func (m *Maker) Make(ctx context.Context, req Request) (template.Meta, error) {
	if err := m.CheckNamespace(req.Namespace); err != nil {
		return template.Meta{}, err
	}
	key := m.Key(req)
	for {
		wait, mine := m.claim(key)
		if mine {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return template.Meta{}, ctx.Err()
		}
	}
	defer m.release(key)
	return m.build(ctx, req, key, func(ctx context.Context) (func(), error) {
		if err := m.turns.wait(ctx, func() int { return m.limits().MaxMaking }); err != nil {
			return nil, err
		}
		return m.turns.give, nil
	})
}

// build makes template key of req, its maker (claim): unless it exists
// (it is returned as it is, a failed one until it may be made again),
// it takes a turn (slot), makes room among the kept templates, and
// makes it.
func (m *Maker) build(ctx context.Context, req Request, key string, slot func(context.Context) (func(), error)) (template.Meta, error) {
	if meta, err := m.Store.Get(key); err == nil {
		if err := m.mismatch(meta, req); err != nil {
			return meta, err
		}
		if meta.State != template.Failed {
			return meta, nil
		}
		if wait := m.RetryIn(meta); wait > 0 {
			return meta, fmt.Errorf("template %s of %s failed: %s (made again in %s, or at once after crimuxctl template rm %s): %w",
				key, req.Image, meta.Error, wait.Round(time.Second), key, errdefs.ErrFailedPrecondition)
		}
		if err := m.Store.Remove(key); err != nil {
			return meta, err
		}
		m.R.Log.Info("failed template made again", "template", key, "image", req.Image, "failed", meta.Error)
	} else if !errdefs.IsNotFound(err) {
		return meta, err
	}
	done, err := slot(ctx)
	if err != nil {
		return template.Meta{}, err
	}
	defer done()
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = DefaultMakeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	meta, err := m.make(ctx, req, key)
	if err != nil {
		return meta, err
	}
	m.R.Log.Info("template made", "template", key, "image", req.Image, "shape", req.Shape.String(), "namespace", meta.Namespace,
		"took", time.Since(start).Round(time.Millisecond))
	return meta, nil
}

// claim makes this caller key's maker, or returns what to wait for.
func (m *Maker) claim(key string) (wait <-chan struct{}, mine bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch, ok := m.making[key]; ok {
		return ch, false
	}
	if m.making == nil {
		m.making = map[string]chan struct{}{}
	}
	m.making[key] = make(chan struct{})
	return nil, true
}

func (m *Maker) release(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.making[key])
	delete(m.making, key)
}
