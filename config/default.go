package config

// DefaultTOML is what `crimux config default` prints: the defaults of
// Default(), commented for an operator. config_test.go checks that it parses
// to exactly Default().
const DefaultTOML = `# crimux configuration (/etc/crimux/config.toml).
# Flags --listen, --state-dir, --containerd-endpoint, --libvirt-uri,
# --vm-accel, --cni-conf-dir, --log-level and --metrics-address override the
# matching keys.
# SIGHUP (systemctl reload crimux) re-reads this file: runtimes can be added
# and removed live; listen, state_dir, metrics_address and [kubernetes] need
# a restart.

# Unix socket kubelet and crimuxctl connect to (created 0660):
#   kubelet --container-runtime-endpoint=unix:///run/crimux/crimux.sock
listen = "/run/crimux/crimux.sock"

# Persistent state: the VM store, overlay disks, the instance identity.
state_dir = "/var/lib/crimux"

# debug, info, warn or error.
log_level = "info"

# Prometheus metrics over HTTP at host:port (e.g. "127.0.0.1:9117"; keep it
# on loopback or a trusted network); "" serves none. Flag --metrics-address.
metrics_address = ""

[containerd]
# containerd's CRI socket.
endpoint = "unix:///run/containerd/containerd.sock"
# Deadline of one CRI call; RunPodSandbox gets 4x, StopContainer adds its
# grace period.
call_timeout = "2m0s"

[libvirt]
# libvirtd connection of the VM runtime.
uri = "qemu:///system"
# auto, kvm or tcg (software emulation, for hosts where KVM is absent or broken).
accel = "auto"
# Every VM's <emulator>: a wrapper that waits until crimux has put it into
# the pod's cgroup, then runs qemu (libvirt's own cgroup handling must be
# off: cgroup_controllers = [ ] in /etc/libvirt/qemu.conf).
emulator = "/usr/local/lib/crimux/crimux-qemu-wrapper"
# Where the wrapper asks crimux for that placement.
placement_socket = "/run/crimux/placement.sock"
# Added to a VM's RAM for its cgroup memory limit: qemu's own memory.
memory_overhead_mib = 256
# In-place resize (kubectl patch pod --subresource resize): how many vCPUs
# a running VM can be given (hot plug); 0 is the node's cores. And how much
# RAM (virtio-mem, plugged in MiB steps); 0 is twice what the VM boots
# with; at most what it boots with turns memory resize off. The guest must
# online what is plugged: crimux does so through the guest agent.
max_vcpus = 0
max_memory_mib = 0
# The largest disk a VM image may declare (a qcow2's virtual size): its
# overlay grows up to it on the state dir's filesystem. Larger images are
# refused at CreateContainer.
max_disk_virtual_size_gib = 64
# The VM console (Attach) streaming server; port 0 picks a free port.
streaming_addr = "127.0.0.1:0"
# VM pods' network: "cni" gives each VM pod a pod IP from the node's CNI
# config (the same conf dir and plugins as containerd's), owned by the
# guest (DHCP); "none" runs VM pods without a network.
network = "cni"
cni_conf_dir = "/etc/cni/net.d"
cni_bin_dirs = ["/opt/cni/bin", "/usr/lib/cni"]
# Where VM pods' network namespaces are mounted.
netns_dir = "/run/crimux/netns"

[kubernetes]
# The node agent: with a kubeconfig, crimux watches this node's pods and
# applies their crimux.io/power-state, reboot-request, snapshot-request and
# restore-request annotations to their VMs, writing the results back as
# annotations and events. Off while kubeconfig is "". Its identity needs the
# RBAC of crimux-node-agent-rbac.yaml (pods get/list/watch/patch, events).
kubeconfig = ""
# This node's name in the cluster; "" is the host name, lower-cased. It must
# be kubelet's node name (kubelet's --hostname-override, if set).
node_name = ""

# The runtime registry. Each runtime serves a workload type (container, vm)
# and the RuntimeClass handlers listed. A new pod goes to the runtime of its
# handler, else of its crimux.io/workload-type annotation, else to the
# primary. Exactly one runtime is primary: its readiness is the node's.
[[runtime]]
name = "containerd"
type = "container"
handlers = ["runc"]
primary = true
# endpoint = "unix:///run/containerd/containerd.sock"  # default: [containerd].endpoint

# VMs: pods whose RuntimeClass handler is "vm" (or annotated
# crimux.io/workload-type: vm) run as libvirt + qemu VMs.
[[runtime]]
name = "vm"
type = "vm"
handlers = ["vm"]
`
