package main

import (
	"context"
	"io"
	"testing"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/cri"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/vmtypes"
)

// nodeSamplerBackend declares the vmtypes.NodeSampler ability alone.
type nodeSamplerBackend struct{ plainBackend }

func (nodeSamplerBackend) NodeSample(context.Context) (vmtypes.NodeSample, error) {
	return vmtypes.NodeSample{AgentCapPerNode: 8, GuestBootsStuck: 1}, nil
}

// TestDaemonVMNode: the metrics read the node-wide state of the backend
// declaring the ability, and nothing without one.
func TestDaemonVMNode(t *testing.T) {
	d := newDaemon(config.Default(), flags{}, nil, io.Discard)
	if s, err := d.vmNode(context.Background()); s != nil || err != nil {
		t.Errorf("vmNode before the runtimes start = %v, %v; want nothing", s, err)
	}
	for vm, want := range map[registry.Backend]bool{plainBackend{}: false, nodeSamplerBackend{}: true} {
		reg, err := registry.New(context.Background(), config.Default(), map[string]registry.Factory{
			config.TypeContainer: backendFactory{plainBackend{}}, config.TypeVM: backendFactory{vm},
		})
		if err != nil {
			t.Fatal(err)
		}
		d.cri = cri.New(reg, d.log)
		s, err := d.vmNode(context.Background())
		if err != nil || (s != nil) != want || (want && (s.AgentCapPerNode != 8 || s.GuestBootsStuck != 1)) {
			t.Errorf("vmNode with a %T = %+v, %v; want a sample: %v", vm, s, err, want)
		}
	}
}
