package main

import (
	"context"

	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/vmtypes"
)

// vmNode is the node-wide state of the VM runtime in force (its
// vmtypes.NodeSampler ability), for metrics; nil when there is none.
// crimux has one VM runtime at most (all vm entries share it): the first
// runtime with the ability answers.
func (d *daemon) vmNode(ctx context.Context) (*vmtypes.NodeSample, error) {
	if d.cri == nil {
		return nil, nil
	}
	for _, rt := range d.cri.Registry().Backends() {
		if s, ok := registry.Ability[vmtypes.NodeSampler](rt); ok {
			sample, err := s.NodeSample(ctx)
			if err != nil {
				return nil, err
			}
			return &sample, nil
		}
	}
	return nil, nil
}
