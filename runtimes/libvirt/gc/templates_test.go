package gc

import (
	"context"
	"slices"
	"testing"

	"github.com/crimux/crimux/runtimes/libvirt/template"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// A template's domain that no making of this crimux owns goes if it is
// this crimux's (left by its earlier self); another instance's, which
// that instance is making right now on the same libvirtd, is foreign and
// stays.
func TestTemplateDomainOfAnotherInstanceStays(t *testing.T) {
	e := newEnv(t)
	mine, theirs := template.Domain("aaaaaaaaaaaaaaaa"), template.Domain("bbbbbbbbbbbbbbbb")
	e.putDomain(mine, stamp(t, e.R.Opts.Instance, "", "template-aaaaaaaaaaaaaaaa"), virt.StateRunning)
	e.putDomain(theirs, stamp(t, "other", "", "template-bbbbbbbbbbbbbbbb"), virt.StateRunning)
	rep := e.gc.CollectGarbage(context.Background(), true)
	if _, ok := e.hasDomain(mine); ok {
		t.Errorf("this crimux's leftover template domain %s was not removed", mine)
	}
	if st, ok := e.hasDomain(theirs); !ok || st != virt.StateRunning {
		t.Errorf("another crimux's template domain %s: %v %v, want it running still", theirs, st, ok)
	}
	if !slices.Contains(rep.Foreign, theirs) {
		t.Errorf("report's foreign domains %v lack %s", rep.Foreign, theirs)
	}
}
