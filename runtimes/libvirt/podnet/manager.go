package podnet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
)

// Config locates the node's CNI setup and crimux's namespaces.
type Config struct {
	// ConfDir holds the network config (the first file in name order is
	// used), BinDirs the plugins: the same as containerd's.
	ConfDir string
	BinDirs []string
	// CacheDir is libcni's result cache (crimux's own, under its state dir).
	CacheDir string
	// NetnsDir is where pod namespaces are bind-mounted.
	NetnsDir string
	// Instance is crimux's identity, the prefix of its namespaces' names.
	Instance string
}

// ifName is the CNI interface in every pod namespace, as for containers.
const ifName = "eth0"

// Pod is what CNI is told about a VM pod.
type Pod struct {
	SandboxID, Namespace, Name, UID string
	Ports                           []PortMapping
	// Bandwidth is the pod's traffic shaping (the bandwidth capability).
	Bandwidth Bandwidth
	// For the guest (DHCP): its hostname and resolver.
	Hostname string
	DNS      []string
	Search   []string
}

// PortMapping is a CRI port mapping for the portmap plugin.
type PortMapping struct {
	HostPort      int32  `json:"host_port"`
	ContainerPort int32  `json:"container_port"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"host_ip,omitempty"`
}

// Bandwidth is a pod's traffic shaping in bits per second, 0 no limit:
// Ingress what reaches the guest, Egress what it sends.
type Bandwidth struct{ Ingress, Egress uint64 }

// Attachment is a VM pod's network, as the caller keeps it (JSON in its
// store) from before anything exists until Teardown has succeeded.
type Attachment struct {
	// NetNS is the namespace's path, Conf the network config ADD ran
	// with: set by Plan, before anything is created.
	NetNS string `json:"netns"`
	Conf  []byte `json:"conf"`
	// Set once Setup succeeded.
	addressing
	GuestMAC string `json:"guest_mac,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	Ready    bool   `json:"ready,omitempty"`
}

// Manager wires VM pods to the pod network.
type Manager struct {
	cfg Config
	cni cniRunner
	log *slog.Logger
	// inflight holds GC back from attachments an ADD or DEL works on.
	inflight *inflight

	mu         sync.Mutex
	responders map[string]*guestServers // by sandbox ID
	// oldNetworks are the networks (name@cniVersion) already logged as
	// older than CNI 1.1.
	oldNetworks map[string]bool
}

// NewManager checks the directories and prepares the namespace dir.
func NewManager(cfg Config, log *slog.Logger) (*Manager, error) {
	if cfg.Instance == "" || strings.ContainsAny(cfg.Instance, "/_") {
		return nil, fmt.Errorf("podnet: instance %q must be set, without '/' or '_'", cfg.Instance)
	}
	if err := ensureSharedDir(cfg.NetnsDir); err != nil {
		return nil, fmt.Errorf("netns dir: %w", err)
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
		return nil, err
	}
	cni := withIPAMGC{libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cfg.CacheDir, nil), cfg.BinDirs}
	return newManager(cfg, cni, log), nil
}

func newManager(cfg Config, cni cniRunner, log *slog.Logger) *Manager {
	return &Manager{
		cfg: cfg, cni: cni, log: log, inflight: newInflight(hostLockOf(cfg.NetnsDir)),
		responders: map[string]*guestServers{}, oldNetworks: map[string]bool{},
	}
}

// NetNSPath is where the namespace of a sandbox lives.
func (m *Manager) NetNSPath(sandboxID string) string {
	return filepath.Join(m.cfg.NetnsDir, m.cfg.Instance+"_"+sandboxID)
}

// Plan picks the network config and the namespace path of a new pod,
// creating nothing: the caller records the plan first (intent).
func (m *Manager) Plan(sandboxID string) (*Attachment, error) {
	_, conf, err := loadConfig(m.cfg.ConfDir)
	if err != nil {
		return nil, err
	}
	return &Attachment{NetNS: m.NetNSPath(sandboxID), Conf: conf}, nil
}

// Setup creates the namespace, runs CNI ADD and wires the guest's side,
// filling a. On error the caller runs Teardown (which undoes whatever
// part was done) and keeps a until it succeeds.
func (m *Manager) Setup(ctx context.Context, pod *Pod, a *Attachment) error {
	list, err := libcni.NetworkConfFromBytes(a.Conf)
	if err != nil {
		return fmt.Errorf("CNI config: %w", err)
	}
	defer m.inflight.begin(pod.SandboxID)()
	if err := createNetNS(a.NetNS); err != nil {
		return err
	}
	res, err := m.add(ctx, list, pod.runtimeConf(a.NetNS, ifName))
	if err != nil {
		return err
	}
	if a.addressing, err = addressingOf(res, a.NetNS, ifName); err != nil {
		return err
	}
	var w wiring
	err = inNetNS(a.NetNS, func() error {
		var err error
		if w, err = wire(ifName, a.GuestMAC); err != nil {
			return err
		}
		if v6, ok := a.IPv6(); ok && v6.Gateway != "" {
			return routeIPv6(v6.Gateway)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("wire the guest into %s: %w", a.NetNS, err)
	}
	a.GuestMAC, a.MTU, a.Ready = w.GuestMAC, w.MTU, true
	return nil
}

// Teardown stops the pod's DHCP responder, runs CNI DEL with the kept
// config and removes the namespace. Idempotent; an error leaves what is
// left for the next call.
func (m *Manager) Teardown(ctx context.Context, pod *Pod, a *Attachment) error {
	m.StopDHCP(pod.SandboxID)
	defer m.inflight.begin(pod.SandboxID)()
	netns := a.NetNS
	if !isNetNS(netns) {
		netns = "" // gone: DEL still releases the IP, CNI allows it
	}
	if err := m.del(ctx, a.Conf, pod.runtimeConf(netns, ifName)); err != nil {
		return err
	}
	return removeNetNS(a.NetNS)
}

// StartDHCP (re)starts what hands the guest its addresses: the DHCP
// responder for its IPv4 address, router advertisements and DHCPv6 for
// its IPv6 one.
func (m *Manager) StartDHCP(pod *Pod, a *Attachment) error {
	if !a.Ready {
		return fmt.Errorf("network of %s is not set up", pod.SandboxID)
	}
	m.StopDHCP(pod.SandboxID)
	s, err := startGuestServers(pod, a, m.log.With("sandbox", pod.SandboxID))
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.responders[pod.SandboxID] = s
	m.mu.Unlock()
	return nil
}

// StopDHCP stops a pod's responders, if they run.
func (m *Manager) StopDHCP(sandboxID string) {
	m.mu.Lock()
	r := m.responders[sandboxID]
	delete(m.responders, sandboxID)
	m.mu.Unlock()
	if r != nil {
		r.stop()
	}
}

// Close stops every responder (the namespaces and the guests' addresses
// stay: a restarted crimux serves them again).
func (m *Manager) Close() {
	m.mu.Lock()
	rs := m.responders
	m.responders = map[string]*guestServers{}
	m.mu.Unlock()
	for _, r := range rs {
		r.stop()
	}
}

// OpenTap opens a new file on the pod's tap for a qemu process. Only one
// process can hold the tap at a time (the previous qemu of a restore or
// revert has exited by then).
func (m *Manager) OpenTap(a *Attachment) (*os.File, error) {
	if !a.Ready {
		return nil, fmt.Errorf("network in %s is not set up", a.NetNS)
	}
	var f *os.File
	err := inNetNS(a.NetNS, func() error {
		var err error
		f, err = openTapHere(tapName)
		return err
	})
	return f, err
}

// PCI slot of the guest NIC on the i440fx root bus (pci.0): fixed, far
// above the slots libvirt hands out in order, so it is the same in every
// qemu process of a VM.
const nicSlot = "0x1e"

// QemuArgs are the qemu arguments of the guest NIC; fd is the placeholder
// the wrapper replaces with the tap file's number.
func (a *Attachment) QemuArgs(fd string) []string {
	return []string{
		"-netdev", "tap,id=crimux-net0,fd=" + fd + ",vhost=off",
		"-device", "virtio-net-pci,netdev=crimux-net0,id=crimux-nic0,mac=" + a.GuestMAC + ",bus=pci.0,addr=" + nicSlot,
	}
}

// Namespaces lists the pod namespaces in the netns dir: the sandbox IDs
// of this instance's, and the file names of anyone else's.
func (m *Manager) Namespaces() (own map[string]string, foreign []string, err error) {
	entries, err := os.ReadDir(m.cfg.NetnsDir)
	if err != nil {
		return nil, nil, err
	}
	own = map[string]string{}
	for _, e := range entries {
		inst, id, ok := strings.Cut(e.Name(), "_")
		if ok && inst == m.cfg.Instance && id != "" {
			own[id] = filepath.Join(m.cfg.NetnsDir, e.Name())
			continue
		}
		foreign = append(foreign, e.Name())
	}
	return own, foreign, nil
}

// Collect tears down a namespace of this instance that no record owns
// (a wiped store).
func (m *Manager) Collect(ctx context.Context, sandboxID string) error {
	return m.teardownCurrent(ctx, sandboxID, m.NetNSPath(sandboxID))
}

// teardownCurrent tears down the namespace at path of a sandbox whose
// setup config is lost (no record of it here): CNI DEL with the conf
// dir's config now, the sandbox ID as container ID, as ADD was run.
func (m *Manager) teardownCurrent(ctx context.Context, sandboxID, path string) error {
	_, conf, err := loadConfig(m.cfg.ConfDir)
	if err != nil {
		return err
	}
	return m.Teardown(ctx, &Pod{SandboxID: sandboxID}, &Attachment{NetNS: path, Conf: conf})
}
