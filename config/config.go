// Package config owns crimux's TOML configuration: its defaults, loading and
// a pure Validate. Host checks (sockets reachable, binaries present) belong
// to the runtimes, not here.
package config

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// DefaultPath is where crimux looks for its config unless --config says otherwise.
const DefaultPath = "/etc/crimux/config.toml"

// Workload types a runtime can serve.
const (
	TypeContainer = "container"
	TypeVM        = "vm"
)

// VM pod networks ([libvirt].network).
const (
	NetworkCNI  = "cni"
	NetworkNone = "none"
)

// KnownTypes lists the workload types this build can run.
var KnownTypes = []string{TypeContainer, TypeVM}

// Config is the whole of crimux's configuration.
type Config struct {
	// Listen is the unix socket kubelet and crimuxctl talk to.
	Listen string `toml:"listen"`
	// StateDir holds crimux's persistent state.
	StateDir string `toml:"state_dir"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// LogFormat is text (key=value lines) or json (one object per line).
	LogFormat string `toml:"log_format"`
	// MetricsAddress is where Prometheus metrics are served over HTTP
	// (host:port, e.g. 127.0.0.1:9117); "" serves none.
	MetricsAddress string     `toml:"metrics_address"`
	Containerd     Containerd `toml:"containerd"`
	Libvirt        Libvirt    `toml:"libvirt"`
	Kubernetes     Kubernetes `toml:"kubernetes"`
	Runtimes       []Runtime  `toml:"runtime"`
}

// Containerd says how to reach containerd's CRI service.
type Containerd struct {
	Endpoint string `toml:"endpoint"`
	// CallTimeout bounds each CRI call; RunPodSandbox gets four times it,
	// StopContainer gets the grace period on top.
	CallTimeout Duration `toml:"call_timeout"`
}

// Libvirt configures the VM runtime and how it reaches libvirtd.
type Libvirt struct {
	URI   string `toml:"uri"`
	Accel string `toml:"accel"`
	// Emulator is the qemu wrapper set as every domain's <emulator>: it
	// waits until crimux has placed it in the pod's cgroup, then runs qemu.
	Emulator string `toml:"emulator"`
	// PlacementSocket is where the wrapper asks crimux for that placement.
	PlacementSocket string `toml:"placement_socket"`
	// MemoryOverheadMiB is added to a VM's RAM for its cgroup memory limit.
	MemoryOverheadMiB int64 `toml:"memory_overhead_mib"`
	// MaxVCPUs is how many vCPUs a running VM can be resized to (hot
	// plug); 0 is the node's cores.
	MaxVCPUs int `toml:"max_vcpus"`
	// MaxMemoryMiB is how much RAM a running VM can be resized to
	// (virtio-mem); 0 is twice what it boots with; at most what it boots
	// with turns memory resize off.
	MaxMemoryMiB int64 `toml:"max_memory_mib"`
	// MaxDiskVirtualSizeGiB caps the disk a VM image may declare (its
	// overlay grows up to it on the state dir's filesystem).
	MaxDiskVirtualSizeGiB int64 `toml:"max_disk_virtual_size_gib"`
	// AgentCallsPerVM and AgentCallsPerNode bound the guest-agent calls
	// (exec, exec probes, resize) in flight to one VM and on the node:
	// each holds a libvirtd worker as long as the guest takes to answer.
	// Past a cap a call waits in line up to 3 s, then is refused
	// (ResourceExhausted).
	AgentCallsPerVM   int `toml:"agent_calls_per_vm"`
	AgentCallsPerNode int `toml:"agent_calls_per_node"`
	// MaxSnapshotsPerVM caps a VM's snapshots: each holds its disk's
	// changes since, and a running VM's RAM, inside the pod's disk.
	MaxSnapshotsPerVM int `toml:"max_snapshots_per_vm"`
	// StreamingAddr is where the VM console (Attach) streaming server
	// listens; port 0 picks a free port.
	StreamingAddr string `toml:"streaming_addr"`
	// Network is how VM pods get a pod network: "cni" (the node's CNI
	// config and plugins, as containerd uses them) or "none".
	Network string `toml:"network"`
	// CNIConfDir and CNIBinDirs: the same as containerd's CNI settings.
	CNIConfDir string   `toml:"cni_conf_dir"`
	CNIBinDirs []string `toml:"cni_bin_dirs"`
	// NetnsDir is where VM pods' network namespaces are mounted.
	NetnsDir string `toml:"netns_dir"`
	// VMIDBase and VMIDCount are the uids and gids VM pods' qemu run as,
	// one of its own each: VMIDBase+1 to VMIDBase+VMIDCount-1. No host
	// account and no user namespace (kubelet's /etc/subuid ranges) may
	// use them. Count 0: every qemu runs as qemu.conf's user (unsafe).
	VMIDBase  uint32 `toml:"vm_id_base"`
	VMIDCount uint32 `toml:"vm_id_count"`
	// GuestBootTimeout is how long a cold-booted VM's guest may show no
	// sign of an operating system (a packet on its pod network, its agent
	// connected) before it is reported stuck in its firmware or boot
	// loader; 0 turns the watch off.
	GuestBootTimeout Duration `toml:"guest_boot_timeout"`
	// GCInterval is how often the collector passes over the VM runtime's
	// leftovers (domains, files, pod networks and CNI GC, image cache).
	GCInterval Duration `toml:"gc_interval"`
	// Templates lets VM pods that ask for it (RuntimeClass vm-instant, or
	// the annotation crimux.io/start: template) start from their image's
	// booted template; false boots every VM. TemplateCgroupParent is
	// the cgroup templates are made under.
	Templates            bool   `toml:"templates"`
	TemplateCgroupParent string `toml:"template_cgroup_parent"`
	// TemplateShareAcrossNamespaces makes one template of an image and
	// shape serve the pods of every namespace; false (the default): each
	// namespace has its own, since a template's clones share its kernel's
	// secrets, boot ID and address layout (docs/security.md).
	TemplateShareAcrossNamespaces bool `toml:"template_share_across_namespaces"`
	// TemplateMaxMaking bounds the templates being made at once on the
	// node (a pod beyond it boots, no queue); TemplateMaxKept the
	// templates kept on the state disk (beyond it the least recently used
	// one no clone needs is removed before another is made).
	TemplateMaxMaking int `toml:"template_max_making"`
	TemplateMaxKept   int `toml:"template_max_kept"`
	// TemplateRetryAfter is how long a failed template stays failed
	// before a pod makes it again.
	TemplateRetryAfter Duration `toml:"template_retry_after"`
	// TemplateCPUMillis is the CPU quota of a template's VM, in
	// thousandths of a CPU (its cgroup's cpu.max); 0: none.
	TemplateCPUMillis int64 `toml:"template_cpu_millis"`
	// Migration moves running VMs between nodes.
	Migration Migration `toml:"migration"`
}

// Migration configures live migration. A node takes part once Address
// and PKIDir are set; until then a VM can neither leave nor arrive.
type Migration struct {
	// Address is where this node's crimux carries migration streams
	// (host:port on the node's address), over mutually authenticated TLS.
	Address string `toml:"address"`
	// LibvirtURI is how other nodes' libvirtd reach this node's, peer to
	// peer (qemu+tls://host/system); they add their own pkipath.
	LibvirtURI string `toml:"libvirt_uri"`
	// PKIDir holds this node's key pair and the CA, in libvirt's names
	// (cacert.pem, servercert.pem, serverkey.pem, clientcert.pem,
	// clientkey.pem): crimux's streams and libvirtd's peer connections
	// both use it.
	PKIDir string `toml:"pki_dir"`
	// BandwidthMiB caps a migration's memory stream (MiB/s); KubeVirt's
	// default is 64.
	BandwidthMiB uint64 `toml:"bandwidth_mib"`
	// CompletionTimeoutPerGiB: a migration still running after this much
	// per GiB of the VM's memory and disk is aborted (KubeVirt: 800 s).
	CompletionTimeoutPerGiB Duration `toml:"completion_timeout_per_gib"`
	// MaxOutgoing is how many VMs may leave the node at once.
	MaxOutgoing int `toml:"max_outgoing"`
	// TargetTimeout is how long a target pod waits for its VM.
	TargetTimeout Duration `toml:"target_timeout"`
	// ProgressTimeout aborts a migration that moved no byte for so long
	// (a link cut, a target gone quiet); KubeVirt's default is 150 s.
	ProgressTimeout Duration `toml:"progress_timeout"`
}

// Enabled: the node can send and receive VMs.
func (m Migration) Enabled() bool { return m.Address != "" && m.PKIDir != "" }

// Kubernetes configures the node agent (package nodeagent), which applies
// the crimux.io/ annotations of this node's VM pods to their VMs. It runs
// only when Kubeconfig is set.
type Kubernetes struct {
	// Kubeconfig is the agent's credentials and API server.
	Kubeconfig string `toml:"kubeconfig"`
	// NodeName is this node's name in the cluster; "" means the host name
	// (lower-cased, as kubelet takes it). It must equal kubelet's node name
	// (its --hostname-override, if it has one).
	NodeName string `toml:"node_name"`
}

// Runtime is one entry of the runtime registry.
type Runtime struct {
	// Name identifies the runtime in logs, conditions and the IDs it owns.
	Name string `toml:"name"`
	// Type is the workload type: container or vm.
	Type string `toml:"type"`
	// Handlers are the RuntimeClass handlers this runtime serves.
	Handlers []string `toml:"handlers"`
	// Primary marks the runtime whose readiness is the node's.
	Primary bool `toml:"primary"`
	// Endpoint overrides [containerd].endpoint for container runtimes.
	Endpoint string `toml:"endpoint,omitempty"`
}

// Duration is a time.Duration written as "10s" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses "2m", "10s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	d.Duration = v
	return err
}

// MarshalText writes the duration back as "10s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Default returns the configuration crimux runs with when no file exists.
func Default() Config {
	return Config{
		Listen:    "/run/crimux/crimux.sock",
		StateDir:  "/var/lib/crimux",
		LogLevel:  "info",
		LogFormat: "text",
		Containerd: Containerd{
			Endpoint:    "unix:///run/containerd/containerd.sock",
			CallTimeout: Duration{2 * time.Minute},
		},
		Libvirt: Libvirt{
			URI: "qemu:///system", Accel: "auto",
			Emulator:              "/usr/local/lib/crimux/crimux-qemu-wrapper",
			PlacementSocket:       "/run/crimux/placement.sock",
			MemoryOverheadMiB:     256,
			MaxDiskVirtualSizeGiB: 64,
			AgentCallsPerVM:       4,
			AgentCallsPerNode:     8,
			MaxSnapshotsPerVM:     8,
			StreamingAddr:         "127.0.0.1:0",
			Network:               NetworkCNI,
			CNIConfDir:            "/etc/cni/net.d",
			CNIBinDirs:            []string{"/opt/cni/bin", "/usr/lib/cni"},
			NetnsDir:              "/run/crimux/netns",
			VMIDBase:              DefaultVMIDBase,
			VMIDCount:             DefaultVMIDCount,
			GuestBootTimeout:      Duration{3 * time.Minute},
			GCInterval:            Duration{time.Minute},
			Templates:             true,
			Migration: Migration{BandwidthMiB: 64, CompletionTimeoutPerGiB: Duration{800 * time.Second}, MaxOutgoing: 1,
				TargetTimeout: Duration{10 * time.Minute}, ProgressTimeout: Duration{150 * time.Second}},
			TemplateCgroupParent: "/crimux-templates",
			TemplateMaxMaking:    1,
			TemplateMaxKept:      8,
			TemplateRetryAfter:   Duration{10 * time.Minute},
			TemplateCPUMillis:    1000,
		},
		Runtimes: []Runtime{
			{Name: "containerd", Type: TypeContainer, Handlers: []string{"runc"}, Primary: true},
			{Name: "vm", Type: TypeVM, Handlers: []string{"vm", "vm-instant"}},
		},
	}
}

// SocketPath is the path of a unix socket address written either way
// kubelet and crictl take it, unix:///run/x.sock, or as the path alone;
// anything else is returned as it is (Validate names it).
func SocketPath(addr string) string {
	if p, ok := strings.CutPrefix(addr, "unix://"); ok && strings.HasPrefix(p, "/") {
		return p
	}
	return addr
}

// Load reads path over the defaults. A missing file at the default path is
// not an error (crimux runs on defaults); a missing explicit file is.
func Load(path string, explicit bool) (Config, error) {
	cfg := Default()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	return Parse(data)
}

// Parse decodes TOML over the defaults and rejects unknown keys, so a typo
// is an error rather than a silently ignored setting.
func Parse(data []byte) (Config, error) {
	cfg := Default()
	cfg.Runtimes = nil
	md, err := toml.Decode(string(data), &cfg)
	if err != nil {
		return cfg, fmt.Errorf("parse config: %w", err)
	}
	cfg.Listen = SocketPath(cfg.Listen)
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return cfg, fmt.Errorf("parse config: unknown keys %s", strings.Join(keys, ", "))
	}
	if !md.IsDefined("runtime") {
		cfg.Runtimes = Default().Runtimes
	}
	return cfg, nil
}

// runtimeName is the syntax of a runtime's name. The name also prefixes the
// runtime's IDs, so validation asks idcodec too whether it can (the ID
// separator must not appear in it).
var runtimeName = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// VM identities (Libvirt.VMIDBase): the default range lies far above any
// account's and above the ranges user namespaces are usually given
// (kubelet's default 65536 per pod from 65536 on would need 28,672 pods
// to reach it); uid 65534 and (uid_t)-1 are never in a valid range.
const (
	DefaultVMIDBase  = 1879048192 // 0x70000000
	DefaultVMIDCount = 65536
	minVMIDBase      = 65536
	maxVMID          = 1<<32 - 1
)
