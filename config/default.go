package config

// DefaultTOML is what `crimux config default` prints: the defaults of
// Default(), commented for an operator. config_test.go checks that it parses
// to exactly Default().
const DefaultTOML = `# crimux configuration (/etc/crimux/config.toml).
# Flags --listen, --state-dir, --containerd-endpoint, --libvirt-uri and
# --vm-accel override the matching keys.

# Unix socket kubelet and crimuxctl connect to (created 0660):
#   kubelet --container-runtime-endpoint=unix:///run/crimux/crimux.sock
listen = "/run/crimux/crimux.sock"

# Persistent state: the VM store, overlay disks, the instance identity.
state_dir = "/var/lib/crimux"

# debug, info, warn or error.
log_level = "info"

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
`
