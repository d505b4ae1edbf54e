package vmmigration

import (
	"testing"
	"time"

	"github.com/crimux/crimux/kubeapi"
)

// TestControllerStoppedAtEachStep: the controller stops (its leader
// lost, its process killed) at each step of a migration, and a new one
// starts: the migration ends Succeeded, once: one target pod made, the
// source deleted once, the VM's answers relayed in order.
func TestControllerStoppedAtEachStep(t *testing.T) {
	for _, step := range []string{"target running", "mid-stream", "after the switch-over"} {
		t.Run(step, func(t *testing.T) {
			hit := make(chan struct{})
			once := func() {
				select {
				case <-hit:
				default:
					close(hit)
				}
			}
			b := behaviour{}
			switch step {
			case "target running":
				b.onTargetRun = once
			case "mid-stream":
				b.onProgress = once
			default:
				b.onFinish = once
			}
			r := newRig(t, b, 20*time.Second, vmPod("vm1", "node1"))
			r.ask(t, "mig", "vm1", "node2")
			select {
			case <-hit:
			case <-time.After(10 * time.Second):
				t.Fatal("the step never came")
			}
			r.stop()
			time.Sleep(50 * time.Millisecond) // what the agents write meanwhile
			r.start(t)
			m := r.waitFinal(t, "mig")
			wantEnd(t, m, kubeapi.VMMigrationSucceeded, "Migrated", "downtime 80 ms")
			if getPod(t, r.client, "vm1") != nil || getPod(t, r.client, migTarget) == nil {
				t.Fatal("the source pod is still there, or the target is gone")
			}
			creates, deletes := 0, 0
			for _, a := range r.client.Actions() {
				if a.GetResource().Resource != "pods" {
					continue
				}
				switch a.GetVerb() {
				case "create":
					creates++
				case "delete":
					deletes++
				}
			}
			if creates != 1 || deletes != 1 {
				t.Errorf("%d pods created, %d deleted; want one target made and the source deleted once", creates, deletes)
			}
			requireProtocolOrder(t, r.client)
		})
	}
}

// TestCaps: with one migration allowed per node, the second of node1's
// waits Pending, saying why, and starts once the first ends.
func TestCaps(t *testing.T) {
	hold := make(chan struct{})
	r := newRig(t, behaviour{onTargetRun: func() { <-hold }}, 20*time.Second, vmPod("vm1", "node1"), vmPod("vm2", "node1"))
	r.stop()
	r.ctl.Caps = Caps{PerNode: 1}
	r.start(t)
	r.ask(t, "mig", "vm1", "node2")
	waitPhase(t, r, "mig", func(p string) bool { return p != "" && p != kubeapi.VMMigrationPending })
	r.askUID(t, "mig2", "vm2", "node2", "uid-mig2")
	m2 := waitPhase(t, r, "mig2", func(p string) bool { return p == kubeapi.VMMigrationPending })
	if m2.Status.Message != "waiting: 1 migrations leaving node1, the cap (--max-migrations-per-node)" {
		t.Errorf("the waiting migration says %q", m2.Status.Message)
	}
	close(hold)
	wantEnd(t, r.waitFinal(t, "mig"), kubeapi.VMMigrationSucceeded, "Migrated")
	wantEnd(t, r.waitFinal(t, "mig2"), kubeapi.VMMigrationSucceeded, "Migrated")
}

func waitPhase(t *testing.T, r *rig, name string, ok func(string) bool) *kubeapi.VMMigration {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := r.store.Get(t.Context(), testNS, name)
		if err == nil && ok(m.Status.Phase) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("migration %s: %+v, %v", name, m, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
