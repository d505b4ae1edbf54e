// Package vmops is the VM runtime's VM API operations: what a VM can do
// that a container cannot — power states, reboots, snapshots — and the
// power-state counts metrics read. The vmapi package serves them over
// gRPC (as vmtypes.Operator); here they are plain methods, addressed by
// the runtime's own pod or container IDs (without the "vm--" prefix).
// Each runs under the pod's lock (core.BeginVMOp), like every CRI call on
// the same VM.
//
// The power state is the user's choice, kept in the container record;
// the CRI container stays CONTAINER_RUNNING, with the same ID, in every
// one (see vmtypes.PowerState). A stop the user asked for is no exit:
// the power state is recorded before libvirt acts, so the lifecycle event
// of that stop and the resync after a reconnect leave the container
// running (core). A guest that powers itself off while its power state is
// Running still ends the container. After every operation, done or
// failed, the power state is settled from what libvirt reports, so a
// half-done operation leaves a VM the API can act on again.
package vmops

import "github.com/crimux/crimux/runtimes/libvirt/core"

// Ops are the VM operations of a runtime.
type Ops struct{ *core.Runtime }

// New returns the VM operations of the runtime r.
func New(r *core.Runtime) *Ops { return &Ops{r} }
