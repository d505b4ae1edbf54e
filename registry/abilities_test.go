package registry

import "testing"

// recoveringBackend is a backend that declares the Recoverer ability.
type recoveringBackend struct {
	fakeBackend
	done chan struct{}
}

func (b *recoveringBackend) Recovered() <-chan struct{} { return b.done }

func TestAbility(t *testing.T) {
	done := make(chan struct{})
	recovering := &Runtime{Name: "vm", Backend: &recoveringBackend{done: done}}
	plain := &Runtime{Name: "containerd", Backend: &fakeBackend{}}

	r, ok := Ability[Recoverer](recovering)
	if !ok || r.Recovered() != done {
		t.Fatalf("Ability[Recoverer](vm) = %v, %v; want its backend", r, ok)
	}
	if _, ok := Ability[PowerStateCounter](recovering); ok {
		t.Error("a backend without PowerStateCounts has the PowerStateCounter ability")
	}
	if _, ok := Ability[Recoverer](plain); ok {
		t.Error("a backend without Recovered has the Recoverer ability")
	}
	for _, rt := range []*Runtime{nil, {Name: "no backend"}} {
		if _, ok := Ability[Recoverer](rt); ok {
			t.Errorf("Ability[Recoverer](%v) = true", rt)
		}
	}
}

func TestForType(t *testing.T) {
	r, _, _ := newTwo(t)
	if rt, ok := r.ForType("vm"); !ok || rt.Name != "vm" {
		t.Errorf("ForType(vm) = %v, %v", rt, ok)
	}
	if rt, ok := r.ForType("container"); !ok || rt.Name != "containerd" {
		t.Errorf("ForType(container) = %v, %v", rt, ok)
	}
	if rt, ok := r.ForType("wasm"); ok {
		t.Errorf("ForType(wasm) = %v, want none", rt)
	}
}
