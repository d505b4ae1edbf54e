// Package vmtypes holds what a VM runtime can do beyond CRI — power
// states, reboots, snapshots, foreign resources — as plain types and one
// interface, Operator. A VM runtime implements it (runtimes/libvirt); the
// VM API serves it (vmapi) and the registry hands it out as an ability of
// a backend (registry.Ability). Neither side imports the other: both
// import this package, which imports nothing of crimux but errdefs.
package vmtypes
