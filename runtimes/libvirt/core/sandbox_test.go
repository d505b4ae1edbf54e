package core_test

import (
	"context"
	"errors"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/runtimes/libvirt/core/coretest"
)

// TestFinishSandboxRemoval: the network goes, then the record; when the
// network cannot go, the record stays, Removing.
func TestFinishSandboxRemoval(t *testing.T) {
	e := coretest.New(t)
	sb := e.PutPod(t, "sb1", nil)
	e.Net.FailDel = errors.New("plugin timeout")
	e.R.AbandonSandbox(context.Background(), sb)
	rec, err := e.R.Store.Sandbox("sb1")
	if err != nil || !rec.Removing {
		t.Fatalf("record after a failed removal: %+v, %v; want it Removing", rec, err)
	}
	e.Net.FailDel = nil
	if err := e.R.FinishSandboxRemoval(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.R.Store.Sandbox("sb1"); !errdefs.IsNotFound(err) || len(e.Net.Teardowns) != 1 {
		t.Fatalf("record %v, teardowns %v; want it gone, its network torn down once", err, e.Net.Teardowns)
	}
}
