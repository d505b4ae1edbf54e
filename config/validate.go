package config

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/crimux/crimux/internal/idcodec"
)

// Validate checks the configuration without touching the host. Every error
// names the entry at fault.
func (c Config) Validate() error {
	var errs []error
	if !strings.HasPrefix(c.Listen, "/") {
		errs = append(errs, fmt.Errorf("listen: %q must be an absolute unix socket path (/run/x.sock or unix:///run/x.sock)", c.Listen))
	}
	if !strings.HasPrefix(c.StateDir, "/") {
		errs = append(errs, fmt.Errorf("state_dir: %q must be an absolute path", c.StateDir))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level: %q is not one of debug, info, warn, error", c.LogLevel))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log_format: %q is not text or json", c.LogFormat))
	}
	errs = append(errs, validateLibvirt(c.Libvirt)...)
	if c.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddress); err != nil {
			errs = append(errs, fmt.Errorf("metrics_address: %q must be host:port or empty: %v", c.MetricsAddress, err))
		}
	}
	errs = append(errs, validateGuestCaps(c.Libvirt)...)
	errs = append(errs, validateTemplates(c.Libvirt)...)
	if c.Containerd.CallTimeout.Duration <= 0 {
		errs = append(errs, fmt.Errorf("containerd.call_timeout: must be positive"))
	}
	errs = append(errs, validateKubernetes(c.Kubernetes)...)
	errs = append(errs, validateRuntimes(c.Runtimes)...)
	return errors.Join(errs...)
}

// validateLibvirt checks the [libvirt] keys but the guest caps and the
// templates' (validateGuestCaps, validateTemplates).
func validateLibvirt(l Libvirt) []error {
	var errs []error
	switch l.Accel {
	case "auto", "kvm", "tcg":
	default:
		errs = append(errs, fmt.Errorf("libvirt.accel: %q is not one of auto, kvm, tcg", l.Accel))
	}
	switch l.Network {
	case NetworkCNI:
		if !strings.HasPrefix(l.CNIConfDir, "/") || !strings.HasPrefix(l.NetnsDir, "/") || len(l.CNIBinDirs) == 0 {
			errs = append(errs, fmt.Errorf("libvirt.cni_conf_dir, libvirt.cni_bin_dirs and libvirt.netns_dir: must be absolute paths, at least one bin dir"))
		}
	case NetworkNone:
	default:
		errs = append(errs, fmt.Errorf("libvirt.network: %q is not one of %s, %s", l.Network, NetworkCNI, NetworkNone))
	}
	errs = append(errs, validateMigration(l.Migration)...)
	if l.GCInterval.Duration < time.Second {
		errs = append(errs, fmt.Errorf("libvirt.gc_interval: %s is less than a second", l.GCInterval.Duration))
	}
	if l.GuestBootTimeout.Duration < 0 {
		errs = append(errs, fmt.Errorf("libvirt.guest_boot_timeout: %s is negative (0 turns the watch off)", l.GuestBootTimeout.Duration))
	}
	if !strings.HasPrefix(l.Emulator, "/") || !strings.HasPrefix(l.PlacementSocket, "/") {
		errs = append(errs, fmt.Errorf("libvirt.emulator and libvirt.placement_socket: must be absolute paths"))
	}
	if l.VMIDCount > 0 && (l.VMIDBase < minVMIDBase || uint64(l.VMIDBase)+uint64(l.VMIDCount) > maxVMID) {
		errs = append(errs, fmt.Errorf("libvirt.vm_id_base %d and vm_id_count %d: the range must lie within [%d, %d)", l.VMIDBase, l.VMIDCount, minVMIDBase, uint64(maxVMID)))
	}
	if l.MaxDiskVirtualSizeGiB <= 0 || l.MaxDiskVirtualSizeGiB > 1<<20 {
		errs = append(errs, fmt.Errorf("libvirt.max_disk_virtual_size_gib: %d must be between 1 and %d", l.MaxDiskVirtualSizeGiB, 1<<20))
	}
	if l.MaxVCPUs < 0 {
		errs = append(errs, fmt.Errorf("libvirt.max_vcpus: %d must not be negative", l.MaxVCPUs))
	}
	if l.MaxMemoryMiB < 0 {
		errs = append(errs, fmt.Errorf("libvirt.max_memory_mib: %d must not be negative", l.MaxMemoryMiB))
	}
	if l.MemoryOverheadMiB < 0 {
		errs = append(errs, fmt.Errorf("libvirt.memory_overhead_mib: %d must not be negative", l.MemoryOverheadMiB))
	}
	return errs
}

// dns1123Subdomain is the syntax of a Kubernetes node name (at most 253
// characters, checked apart).
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validateMigration(m Migration) []error {
	var errs []error
	if (m.Address == "") != (m.PKIDir == "") {
		errs = append(errs, fmt.Errorf("libvirt.migration: address and pki_dir are set together"))
	}
	if m.Address != "" {
		// Peers are told this address: it must name this node.
		host, port, err := net.SplitHostPort(m.Address)
		if ip := net.ParseIP(host); err != nil || host == "" || port == "0" || (ip != nil && ip.IsUnspecified()) {
			errs = append(errs, fmt.Errorf("libvirt.migration.address: %q is not host:port of this node (peers connect to it)", m.Address))
		}
	}
	if m.Enabled() && !strings.HasPrefix(m.LibvirtURI, "qemu+tls://") {
		errs = append(errs, fmt.Errorf("libvirt.migration.libvirt_uri: %q is not a qemu+tls:// URI (peers connect over TLS only)", m.LibvirtURI))
	}
	if m.MaxOutgoing < 1 {
		errs = append(errs, fmt.Errorf("libvirt.migration.max_outgoing: %d is less than 1", m.MaxOutgoing))
	}
	if m.CompletionTimeoutPerGiB.Duration < time.Second || m.TargetTimeout.Duration < time.Second || m.ProgressTimeout.Duration < time.Second {
		errs = append(errs, fmt.Errorf("libvirt.migration: completion_timeout_per_gib, progress_timeout and target_timeout are at least a second"))
	}
	return errs
}

func validateKubernetes(k Kubernetes) []error {
	var errs []error
	if k.Kubeconfig != "" && !strings.HasPrefix(k.Kubeconfig, "/") {
		errs = append(errs, fmt.Errorf("kubernetes.kubeconfig: %q must be an absolute path or empty", k.Kubeconfig))
	}
	if n := k.NodeName; n != "" && (len(n) > 253 || !dns1123Subdomain.MatchString(n)) {
		errs = append(errs, fmt.Errorf("kubernetes.node_name: %q must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253 characters) or empty", n))
	}
	return errs
}

func validateRuntimes(rts []Runtime) []error {
	var errs []error
	if len(rts) == 0 {
		return []error{errors.New("runtime: at least one runtime must be configured")}
	}
	names := map[string]bool{}
	handlers := map[string]string{}
	var primaries []string
	for i, rt := range rts {
		at := fmt.Sprintf("runtime[%d] %q", i, rt.Name)
		if !runtimeName.MatchString(rt.Name) || !idcodec.ValidPrefix(rt.Name) {
			errs = append(errs, fmt.Errorf("%s: name must be lower-case letters, digits and single dashes, starting with a letter", at))
		}
		if names[rt.Name] {
			errs = append(errs, fmt.Errorf("%s: name used twice", at))
		}
		names[rt.Name] = true
		if !known(rt.Type) {
			errs = append(errs, fmt.Errorf("%s: unknown type %q (known: %s)", at, rt.Type, strings.Join(KnownTypes, ", ")))
		}
		if rt.Primary {
			primaries = append(primaries, rt.Name)
		}
		if rt.Endpoint != "" && !strings.HasPrefix(rt.Endpoint, "unix://") {
			errs = append(errs, fmt.Errorf("%s: endpoint %q must be unix://PATH", at, rt.Endpoint))
		}
		for _, h := range rt.Handlers {
			if other, dup := handlers[h]; dup {
				errs = append(errs, fmt.Errorf("%s: handler %q is already served by runtime %q", at, h, other))
			}
			handlers[h] = rt.Name
		}
	}
	if len(primaries) != 1 {
		errs = append(errs, fmt.Errorf("runtime: exactly one runtime must be primary, found %d (%s)", len(primaries), strings.Join(primaries, ", ")))
	}
	return errs
}

func known(t string) bool {
	for _, k := range KnownTypes {
		if k == t {
			return true
		}
	}
	return false
}
