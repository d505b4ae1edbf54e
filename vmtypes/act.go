package vmtypes

import "context"

type beforeActKey struct{}

// WithBeforeAct returns ctx carrying f, which an operation on a VM calls
// once its checks have passed and just before it acts on the VM (before
// libvirt is asked to reboot it, say). A caller that must never do an
// action twice, even across a crash of crimux, records it there: a record
// written then means the action was, at most, just requested. An error
// from f aborts the operation before it acts.
func WithBeforeAct(ctx context.Context, f func() error) context.Context {
	return context.WithValue(ctx, beforeActKey{}, f)
}

// BeforeAct calls the function of WithBeforeAct, if ctx carries one.
func BeforeAct(ctx context.Context) error {
	if f, ok := ctx.Value(beforeActKey{}).(func() error); ok && f != nil {
		return f()
	}
	return nil
}
