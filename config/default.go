package config

// DefaultTOML is what `crimux config default` prints: the defaults of
// Default(), commented for an operator. config_test.go checks that it parses
// to exactly Default().
const DefaultTOML = `# crimux configuration (/etc/crimux/config.toml).
# Flags --listen, --state-dir, --containerd-endpoint, --libvirt-uri,
# --vm-accel, --cni-conf-dir, --log-level, --log-format and --metrics-address override the
# matching keys.
# SIGHUP (systemctl reload crimux) re-reads this file. log_level, the
# [[runtime]] entries and libvirt's agent call caps, guest_boot_timeout,
# max_snapshots_per_vm, gc_interval, the template bounds (template_max_*,
# _retry_after, _cpu_millis), the migration's bandwidth and timeouts and
# containerd.call_timeout change live; listen, state_dir, metrics_address,
# log_format, [kubernetes] and every other [libvirt] key (while the VM
# runtime is kept) need a restart: a reload that changes one fails,
# naming it, and applies nothing. Each key's
# "reload:" in docs/config.md; what a reload does: docs/node.md,
# "Reloading the config".

# Unix socket kubelet and crimuxctl connect to (created 0660):
#   kubelet --container-runtime-endpoint=unix:///run/crimux/crimux.sock
listen = "/run/crimux/crimux.sock"

# Persistent state: the VM store, overlay disks, the instance identity.
state_dir = "/var/lib/crimux"

# debug, info, warn or error.
log_level = "info"

# text (key=value lines, as logfmt) or json (one object per line, for a log
# pipeline). Flag --log-format.
log_format = "text"

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
# auto, kvm or tcg (software emulation). auto: kvm if /dev/kvm exists and qemu
# can start a KVM vCPU here (probed once at start-up), else tcg.
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
# Guest-agent calls (exec, exec probes, resize) in flight, per VM and on the
# node. Each holds one of libvirtd's workers (max_workers, 20 by default) as
# long as the guest takes to answer; a call past a cap waits in line in
# crimux, up to 3 s, for a call to end, then is refused (ResourceExhausted),
# instead of queueing in libvirtd ahead of other VMs' starts and stops.
# Keep the node's cap below libvirtd's max_workers less its
# max_client_requests (5), which crimux's shared connection may use.
agent_calls_per_vm = 4
agent_calls_per_node = 8
# Snapshots per VM. Each lives in the pod's disk (the disk's changes since,
# and a running VM's RAM), counted in the container's writable layer and
# ImageFsInfo; past the cap CreateSnapshot and crimux.io/snapshot-request are
# refused (ResourceExhausted) until one is deleted.
max_snapshots_per_vm = 8
# The VM console (Attach) streaming server; port 0 picks a free port.
streaming_addr = "127.0.0.1:0"
# VM pods' network: "cni" gives each VM pod a pod IP from the node's CNI
# config (the same conf dir and plugins as containerd's), owned by the
# guest (DHCP); "none" runs VM pods without a network.
network = "cni"
# The CNI network config of VM pods (its first config file in lexical order,
# as containerd takes it). Flag --cni-conf-dir.
cni_conf_dir = "/etc/cni/net.d"
# Where the CNI plugins are looked for, in this order.
cni_bin_dirs = ["/opt/cni/bin", "/usr/lib/cni"]
# Where VM pods' network namespaces are mounted.
netns_dir = "/run/crimux/netns"
# Every VM pod's qemu runs as a uid and gid of its own, from this range
# (vm_id_base+1 up to vm_id_base+vm_id_count-1): no VM can signal, trace or
# open the files of another. No host account and no user namespace
# (kubelet's /etc/subuid) may use these numbers. vm_id_count = 0 runs every
# qemu as qemu.conf's one user: no VM is isolated from another.
vm_id_base = 1879048192
vm_id_count = 65536
# A VM whose guest shows no sign of an operating system this long after it
# was booted (no packet on its pod network, its guest agent not connected) is
# reported stuck in its firmware or boot loader: reason GuestNotBooted in its
# CRI status, a line in its log, a GuestNotBooted event on its pod. "0s" turns
# the watch off.
guest_boot_timeout = "3m0s"
# How often the collector passes over what no VM pod owns any more (domains,
# files, pod networks and CNI GC, the image cache); it also passes after every
# start and libvirtd reconnect.
gc_interval = "1m0s"
# VM pods that ask for it (RuntimeClass vm-instant, or the annotation
# crimux.io/start: template) start from their image's booted template, in
# seconds; the first such pod of an image and shape boots while the template
# is made (docs/templates.md). false boots every VM.
templates = true
# The cgroup templates are made under (a cgroupfs path): each template's VM is
# a leaf there, crimux-vm-template-<key>, outside kubepods (no pod is charged
# for it), limited to its memory (memory.max) and template_cpu_millis (cpu.max).
template_cgroup_parent = "/crimux-templates"
# true makes one template of an image and shape serve the pods of every
# namespace. false: each namespace gets its own, because every clone of a
# template shares its kernel's boot ID, address layout (KASLR), boot-time
# secrets and its daemons' stack canaries (docs/security.md).
template_share_across_namespaces = false
# How many templates the node makes at once; a pod that would start another
# boots, and says the node is making another template (no queue).
template_max_making = 1
# How many templates the state dir keeps, in any state. Before another is
# made beyond it, the failed ones, then the least recently used ready ones
# that no created-but-unstarted clone needs, are removed; if every one is
# needed or being made, no template is made and the pod boots.
template_max_kept = 8
# How long a template whose making failed stays failed (its pods boot) before
# a pod makes it again; crimuxctl template rm makes it again at once.
template_retry_after = "10m"
# The CPU quota of a template's VM in thousandths of a CPU (1000: one CPU);
# 0: none.
template_cpu_millis = 1000

[libvirt.migration]
# Live migration (docs/migration.md): off until address and pki_dir are
# set. address is host:port on this node where crimux carries migrating
# VMs' streams (mutual TLS); libvirt_uri is how other nodes' libvirtd reach
# this node's (it must listen with TLS, the same key pair); pki_dir holds
# cacert.pem, servercert.pem, serverkey.pem, clientcert.pem, clientkey.pem.
address = ""
libvirt_uri = ""
pki_dir = ""
# KubeVirt's defaults: the memory stream at most 64 MiB/s, a migration
# aborted past 800 s per GiB of RAM and disk, or after 150 s moving
# nothing; one VM leaving the node at a time; a target pod waits 10 min.
bandwidth_mib = 64
completion_timeout_per_gib = "13m20s"
progress_timeout = "2m30s"
max_outgoing = 1
target_timeout = "10m0s"

[kubernetes]
# The node agent: with a kubeconfig, crimux watches this node's pods and
# applies their crimux.io/power-state, reboot-request, snapshot-request,
# restore-request and snapshot-delete-request annotations to their VMs,
# writing the results back as annotations (and the VM's snapshots in
# crimux.io/snapshots) and events. Off while kubeconfig is "". Its identity must be
# the user crimux-node-agent:<node_name> in the group crimux:node-agents,
# with crimux-node-agent-rbac.yaml and crimux-node-agent-policy.yaml applied
# (the policy admits only its result annotations, on this node's pods).
kubeconfig = ""
# This node's name in the cluster; "" is the host name, lower-cased. It must
# be kubelet's node name (kubelet's --hostname-override, if set).
node_name = ""

# The runtime registry. Each runtime serves a workload type (container, vm)
# and the RuntimeClass handlers listed. A new pod goes to the runtime of its
# handler, else of its crimux.io/workload-type annotation, else to the
# primary. Exactly one runtime is primary: its readiness is the node's.
[[runtime]]
# Names the runtime in logs, conditions and the IDs it owns.
name = "containerd"
# The workload type it runs: container or vm.
type = "container"
# The RuntimeClass handlers it serves.
handlers = ["runc"]
# The one runtime whose readiness is the node's.
primary = true
# A container runtime's containerd CRI socket, if not [containerd].endpoint.
# endpoint = "unix:///run/containerd/containerd.sock"

# VMs: pods whose RuntimeClass handler is "vm" or "vm-instant" (or annotated
# crimux.io/workload-type: vm) run as libvirt + qemu VMs; "vm-instant" ones
# start from their image's booted template where they can (libvirt.templates).
[[runtime]]
name = "vm"
type = "vm"
handlers = ["vm", "vm-instant"]
`
