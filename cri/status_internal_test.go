package cri

import "testing"

func TestConditionType(t *testing.T) {
	tests := map[string]string{
		"vm":       "VMRuntimeReady",
		"kata-vm":  "KataVMRuntimeReady",
		"gvisor":   "GvisorRuntimeReady",
		"libvirt2": "Libvirt2RuntimeReady",
		"a-b-c":    "ABCRuntimeReady",
	}
	for name, want := range tests {
		if got := conditionType(name); got != want {
			t.Errorf("conditionType(%q) = %q, want %q", name, got, want)
		}
	}
}
