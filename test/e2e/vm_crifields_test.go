package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestVMRefusedCRIFields: a field the VM runtime refuses
// (converter/vm/crifields, docs/cri-fields.md) sent by crictl through
// crimux fails RunPodSandbox or CreateContainer with InvalidArgument
// naming the field by its path, and leaves nothing: no pod, no container,
// no VM directory, no domain.
func TestVMRefusedCRIFields(t *testing.T) {
	requireVM(t)
	c := startCrimux(t, bed.containerd, "--vm-accel", "tcg")
	c.crictl("pull", vmImage)
	parent := testCgroupParent(t)
	domainsBefore := virsh(t, "list", "--all", "--name")
	nothingLeft := func(t *testing.T) {
		t.Helper()
		assertNoVMFiles(t, c)
		assertNoPodFiles(t, c)
		if after := virsh(t, "list", "--all", "--name"); after != domainsBefore {
			t.Fatalf("domains changed after a refused request:\nbefore %q\nafter  %q", domainsBefore, after)
		}
	}
	refused := func(t *testing.T, out string, err error, words ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("accepted (%s), want InvalidArgument", out)
		}
		for _, w := range append([]string{"InvalidArgument", "refused for a VM pod"}, words...) {
			if !strings.Contains(out, w) {
				t.Fatalf("error does not say %q:\n%s", w, out)
			}
		}
		if _, desc, ok := strings.Cut(out, "desc = "); ok {
			t.Log(strings.SplitN(desc, "\n", 2)[0])
		}
	}

	for _, tc := range []struct{ name, linux, field string }{
		{"sysctls", `"sysctls": {"net.core.somaxconn": "1024"}`, "config.linux.sysctls"},
		{"privileged pod", `"security_context": {"privileged": true}`, "config.linux.security_context.privileged"},
		{"host PID", `"security_context": {"namespace_options": {"pid": 2}}`, "config.linux.security_context.namespace_options.pid: NODE"},
		{"host IPC", `"security_context": {"namespace_options": {"ipc": 2}}`, "config.linux.security_context.namespace_options.ipc: NODE"},
	} {
		t.Run("runp/"+tc.name, func(t *testing.T) {
			out, err := c.crictlErr("runp", "--runtime", "vm", vmPodWithLinux(t, "vm-refused-pod", parent, tc.linux))
			refused(t, out, err, tc.field)
			if pods := c.crictl("pods", "--name", "vm-refused-pod", "-q"); pods != "" {
				t.Fatalf("a refused pod is listed: %s", pods)
			}
			nothingLeft(t)
		})
	}

	pod := vmPodJSON(t, "vm-refused", parent, "")
	podID := c.crictl("runp", "--runtime", "vm", pod)
	t.Cleanup(func() { c.crictlErr("rmp", "-f", podID) })
	dir := t.TempDir()
	for _, tc := range []struct{ name, fields, field, words string }{
		{"command", `"command": ["/bin/sh", "-c", "sleep 1"]`, "config.command", "crimux.io/kernel-args"},
		{"args", `"args": ["-c", "true"]`, "config.args", "cloud-init"},
		{"working dir", `"working_dir": "/srv"`, "config.working_dir", "workingDir"},
		{"CDI device", `"CDI_devices": [{"name": "nvidia.com/gpu=0"}]`, "config.CDI_devices", "CDI"},
		{"stop signal", `"stop_signal": 10`, "config.stop_signal", "SIGNAL_SIGINT"},
		{"image volume", `"mounts": [{"container_path": "/models", "image": {"image": "registry.example/models:1"}}]`, "config.mounts[0].image", "image volume"},
		{"bind mount options", fmt.Sprintf(`"mounts": [{"container_path": "/data", "host_path": %q, "mount_options": ["noexec"]}]`, dir),
			"config.mounts[0].mount_options", "noexec"},
		{"bidirectional propagation", fmt.Sprintf(`"mounts": [{"container_path": "/data", "host_path": %q, "propagation": 2}]`, dir),
			"config.mounts[0].propagation", "PROPAGATION_BIDIRECTIONAL"},
	} {
		t.Run("create/"+tc.name, func(t *testing.T) {
			out, err := c.crictlErr("create", podID, vmStorageContainerJSON(t, 0, tc.fields), pod)
			refused(t, out, err, tc.field, tc.words)
			nothingLeft(t)
		})
	}
	for _, tc := range []struct{ name, securityContext, field string }{
		{"privileged container", `"privileged": true`, "config.linux.security_context.privileged"},
		{"read-only root", `"readonly_rootfs": true`, "config.linux.security_context.readonly_rootfs"},
		{"host PID container", `"namespace_options": {"pid": 2}`, "config.linux.security_context.namespace_options.pid: NODE"},
	} {
		t.Run("create/"+tc.name, func(t *testing.T) {
			out, err := c.crictlErr("create", podID, vmContainerWithSecurity(t, tc.securityContext), pod)
			refused(t, out, err, tc.field)
			nothingLeft(t)
		})
	}
	if ctrs := c.crictl("ps", "-a", "-q", "--pod", podID); ctrs != "" {
		t.Fatalf("refused containers are listed: %s", ctrs)
	}
	// The pod still takes its VM: a refusal changed nothing.
	ctrID := c.crictl("create", podID, vmContainerJSON(t, vmImage, vmMemory, ""), pod)
	c.crictl("rm", ctrID)
}

// vmPodWithLinux is vmPodJSON's pod with more of its linux config.
func vmPodWithLinux(t *testing.T, name, cgroupParent, linux string) string {
	return writeJSON(t, "vmpod-linux.json", fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "crimux-e2e", "uid": "%s-uid", "attempt": 0},
  "log_directory": %q,
  "linux": {"cgroup_parent": %q, %s}
}`, name, name, t.TempDir(), cgroupParent, linux))
}

// vmContainerWithSecurity is vmContainerJSON's VM with a security context.
func vmContainerWithSecurity(t *testing.T, securityContext string) string {
	return writeJSON(t, "vmctr-security.json", fmt.Sprintf(`{
  "metadata": {"name": "vm"},
  "image": {"image": %q},
  "log_path": "vm.log",
  "linux": {"resources": {"cpu_period": 100000, "cpu_quota": %d, "memory_limit_in_bytes": %d},
            "security_context": {%s}}
}`, vmImage, vmCPUQuota, vmMemory, securityContext))
}
