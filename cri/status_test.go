package cri_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// conditions indexes a status's conditions by type.
func conditions(t *testing.T, resp *runtimeapi.StatusResponse) map[string]*runtimeapi.RuntimeCondition {
	t.Helper()
	out := map[string]*runtimeapi.RuntimeCondition{}
	for _, c := range resp.GetStatus().GetConditions() {
		if _, dup := out[c.Type]; dup {
			t.Errorf("condition %s reported twice", c.Type)
		}
		out[c.Type] = c
	}
	return out
}

func TestStatus(t *testing.T) {
	h := newHarness(t)
	h.ctrd.SetStatus(&runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady", Message: "cni config uninitialized"},
			{Type: "ContainerdHealthy", Status: true},
		}},
		Info:            map[string]string{"config": "{}"},
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}}},
		Features:        &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
	})

	t.Run("both up", func(t *testing.T) {
		resp, err := h.rs.Status(ctx(t), &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		conds := conditions(t, resp)
		if len(conds) != 5 {
			t.Errorf("conditions = %v, want the primary's three, VMRuntimeReady and VMNetworkReady", resp.Status.Conditions)
		}
		if c := conds[runtimeapi.RuntimeReady]; c == nil || !c.Status {
			t.Errorf("RuntimeReady = %v, want the primary's true", c)
		}
		if c := conds[runtimeapi.NetworkReady]; c == nil || c.Status || c.Reason != "NetworkPluginNotReady" || c.Message != "cni config uninitialized" {
			t.Errorf("NetworkReady = %v, want the primary's condition unchanged", c)
		}
		if c := conds["ContainerdHealthy"]; c == nil || !c.Status {
			t.Errorf("the primary's own extra condition was dropped: %v", resp.Status.Conditions)
		}
		if c := conds["VMRuntimeReady"]; c == nil || !c.Status {
			t.Errorf("VMRuntimeReady = %v, want true", c)
		}
		if !resp.GetFeatures().GetSupplementalGroupsPolicy() {
			t.Errorf("features = %v, want the primary's", resp.Features)
		}
		handlers := map[string]*runtimeapi.RuntimeHandler{}
		for _, rh := range resp.RuntimeHandlers {
			handlers[rh.Name] = rh
		}
		for _, name := range []string{"", "runc", "vm"} {
			if handlers[name] == nil {
				t.Errorf("runtime handler %q missing from %v", name, resp.RuntimeHandlers)
			}
		}
		if !handlers["runc"].GetFeatures().GetRecursiveReadOnlyMounts() {
			t.Errorf("handler runc lost the features containerd reported: %v", handlers["runc"])
		}
		if _, ok := resp.Info["crimux"]; ok {
			t.Errorf("info has crimux's key without verbose")
		}
	})

	t.Run("vm reports not ready", func(t *testing.T) {
		h.vm.SetStatus(&runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: false, Reason: "LibvirtDown", Message: "libvirtd does not answer"},
		}}})
		resp, err := h.rs.Status(ctx(t), &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		conds := conditions(t, resp)
		if c := conds["VMRuntimeReady"]; c == nil || c.Status || c.Reason != "LibvirtDown" || c.Message != "libvirtd does not answer" {
			t.Errorf("VMRuntimeReady = %v, want false with the vm runtime's reason and message", c)
		}
		if c := conds[runtimeapi.RuntimeReady]; c == nil || !c.Status {
			t.Errorf("RuntimeReady = %v; the node must stay ready for containers", c)
		}
	})

	t.Run("vm network not ready", func(t *testing.T) {
		h.vm.SetStatus(&runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: false, Reason: "NetworkPluginNotReady", Message: `plugin type="bridge" failed (status): no host-local`},
		}}})
		resp, err := h.rs.Status(ctx(t), &runtimeapi.StatusRequest{Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		conds := conditions(t, resp)
		if c := conds["VMNetworkReady"]; c == nil || c.Status || c.Reason != "NetworkPluginNotReady" || !strings.Contains(c.Message, "no host-local") {
			t.Errorf("VMNetworkReady = %v, want false with the plugin's message", c)
		}
		if c := conds[runtimeapi.NetworkReady]; c == nil || c.Message != "cni config uninitialized" {
			t.Errorf("NetworkReady = %v, want the primary's, untouched by the VM runtime's", c)
		}
		if !strings.Contains(resp.Info["crimux"], `"network":{"ready":false,"reason":"NetworkPluginNotReady"`) {
			t.Errorf("verbose info lacks the VM runtime's network: %s", resp.Info["crimux"])
		}
	})

	t.Run("vm down", func(t *testing.T) {
		h.stopVM()
		resp, err := h.rs.Status(ctx(t), &runtimeapi.StatusRequest{Verbose: true})
		if err != nil {
			t.Fatalf("Status with vm down: %v", err)
		}
		conds := conditions(t, resp)
		if c := conds["VMRuntimeReady"]; c == nil || c.Status || c.Reason == "" || c.Message == "" {
			t.Errorf("VMRuntimeReady = %v, want false with a reason and message", c)
		}
		if c := conds[runtimeapi.RuntimeReady]; c == nil || !c.Status {
			t.Errorf("RuntimeReady = %v; the node must stay ready for containers", c)
		}
		if resp.Info["config"] != "{}" {
			t.Errorf("verbose info lost the primary's keys: %v", resp.Info)
		}
		var info struct {
			Runtimes []struct {
				Name    string `json:"name"`
				Type    string `json:"type"`
				Primary bool   `json:"primary"`
				Ready   bool   `json:"ready"`
				Reason  string `json:"reason"`
			} `json:"runtimes"`
		}
		if err := json.Unmarshal([]byte(resp.Info["crimux"]), &info); err != nil {
			t.Fatalf("info[crimux] = %q: %v", resp.Info["crimux"], err)
		}
		if len(info.Runtimes) != 2 {
			t.Fatalf("info[crimux] runtimes = %+v, want containerd and vm", info.Runtimes)
		}
		if r := info.Runtimes[0]; r.Name != "containerd" || !r.Primary || !r.Ready {
			t.Errorf("info[crimux] runtime 0 = %+v, want containerd primary ready", r)
		}
		if r := info.Runtimes[1]; r.Name != "vm" || r.Type != "vm" || r.Primary || r.Ready || r.Reason == "" {
			t.Errorf("info[crimux] runtime 1 = %+v, want vm not ready with a reason", r)
		}
	})
}

// The primary down makes the node not ready, but Status itself answers.
func TestStatusPrimaryDown(t *testing.T) {
	h := newHarness(t)
	h.ctrdSrv.Stop()
	resp, err := h.rs.Status(ctx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status with the primary down: %v", err)
	}
	conds := conditions(t, resp)
	for _, typ := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		if c := conds[typ]; c == nil || c.Status || c.Reason == "" {
			t.Errorf("%s = %v, want false with a reason", typ, c)
		}
	}
	if c := conds["VMRuntimeReady"]; c == nil || !c.Status {
		t.Errorf("VMRuntimeReady = %v, want true", c)
	}
}

// A runtime answering Status without a status counts as not ready.
func TestStatusWithoutStatus(t *testing.T) {
	h := newHarness(t)
	h.vm.SetStatus(&runtimeapi.StatusResponse{})
	resp, err := h.rs.Status(ctx(t), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if c := conditions(t, resp)["VMRuntimeReady"]; c == nil || c.Status || c.Reason == "" {
		t.Errorf("VMRuntimeReady = %v, want false with a reason", c)
	}
}

// A hung VM runtime must not hold Status (kubelet's readiness probe of the
// node) for long: it is reported not ready after crimux's status timeout.
func TestStatusVMHung(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.vm.Handle("Status", func(c context.Context, _ proto.Message) (proto.Message, error) {
		<-c.Done()
		return nil, c.Err()
	})
	start := time.Now()
	resp, err := h.rs.Status(ctx(t), &runtimeapi.StatusRequest{})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > 4*time.Second {
		t.Errorf("Status took %v with the vm runtime hung, want about 3s", took)
	}
	conds := conditions(t, resp)
	if c := conds["VMRuntimeReady"]; c == nil || c.Status || c.Reason == "" {
		t.Errorf("VMRuntimeReady = %v, want false with a reason", c)
	}
	if c := conds[runtimeapi.RuntimeReady]; c == nil || !c.Status {
		t.Errorf("RuntimeReady = %v, want true", c)
	}
}
