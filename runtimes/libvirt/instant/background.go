package instant

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/template"
)

// A template made in the background: started by the first pod that asks
// for it (it boots meanwhile), for as long as a pod asks.

// Start makes req's template in the background, for pod (its sandbox
// ID; "" for none), unless there is one already (ready, being made, or
// failed less than RetryAfter ago): nil if one is being made now. A
// making beyond MaxMaking is not started nor queued: ErrBusy. A making
// in the background is cancelled, and leaves nothing, once every pod that
// asked for it (Start, Asks) is forgotten (Forget).
func (m *Maker) Start(req Request, pod string) error {
	key := m.Key(req)
	if err := m.toMake(req, key); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) && !errors.Is(err, ErrOtherTemplate) {
			m.askers.ask(key, pod)
			return nil // made meanwhile, or being made
		}
		return err
	}
	if _, mine := m.claim(key); !mine {
		m.askers.ask(key, pod)
		return nil // being made
	}
	if ok, _ := m.turns.try(m.limits().MaxMaking); !ok {
		m.release(key)
		return ErrBusy
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	m.askers.ask(key, pod)
	m.askers.started(key, cancel)
	go func() {
		defer m.release(key)
		defer m.askers.done(key)
		defer cancel(nil)
		if _, err := m.build(ctx, req, key, func(context.Context) (func(), error) {
			return m.turns.give, nil
		}); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			m.R.Log.Warn("template not made", "image", req.Image, "shape", req.Shape.String(), "namespace", req.Namespace, "err", err)
		}
	}()
	return nil
}

// Asks records that pod asked for req's template, being made in the
// background: its making goes on while pod is there.
func (m *Maker) Asks(req Request, pod string) { m.askers.ask(m.Key(req), pod) }

// Forget forgets pod (removed): a template being made in the background
// that no pod asks for any more is cancelled, and leaves nothing.
func (m *Maker) Forget(pod string) {
	for _, key := range m.askers.forget(pod) {
		m.R.Log.Info("template making cancelled: no pod asks for it any more", "template", key, "pod", pod)
	}
}

// toMake: req's template is to be made (nil), or why not.
func (m *Maker) toMake(req Request, key string) error {
	meta, err := m.Store.Get(key)
	switch {
	case errdefs.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	if err := m.mismatch(meta, req); err != nil {
		return err
	}
	if meta.State != template.Failed {
		return fmt.Errorf("template %s is %s: %w", key, meta.State, errdefs.ErrAlreadyExists)
	}
	if wait := m.RetryIn(meta); wait > 0 {
		return fmt.Errorf("template %s of %s failed: %s (made again in %s, or at once after crimuxctl template rm %s): %w",
			key, req.Image, meta.Error, wait.Round(time.Second), key, errdefs.ErrFailedPrecondition)
	}
	return nil
}
