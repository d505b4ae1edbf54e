// Package report owns what the bench reports: the catalogue of figures
// (names, units, goals), the results the phases record, the `BENCH <name>
// <value> <unit>` lines, and the generated section of docs/benchmarks.md.
package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
)

// Figure is one number the bench reports, under a name that stays the
// same from run to run so runs can be compared.
type Figure struct {
	Name, Unit string
	// Goal is the figure's target (lower is better); 0 is none.
	Goal float64
	What string
}

// Catalogue lists every figure in the order they are printed.
var Catalogue = []Figure{
	{"host_cpu_probe_ms", "ms", 0, "the host's speed, not crimux's: SHA-256 of 16 MiB on one core before each phase (machine.Probe), median; a higher value is a slower host, whose figures are not comparable one to one"},
	{"rpc_version_p50_overhead_us", "us", 50, "Version, crimux p50 minus direct p50"},
	{"rpc_version_p99_overhead_us", "us", 200, "Version, crimux p99 minus direct p99"},
	{"rpc_containerstatus_p50_overhead_us", "us", 50, "ContainerStatus of a running container, p50 difference"},
	{"rpc_containerstatus_p99_overhead_us", "us", 200, "ContainerStatus of a running container, p99 difference"},
	{"rpc_containerstatus_p50_over_rawproxy_us", "us", 20, "ContainerStatus, crimux p50 minus the raw forwarder's p50 (test/bench/rawproxy: the hop alone)"},
	{"rpc_containerstatus_p99_over_rawproxy_us", "us", 100, "ContainerStatus, crimux p99 minus the raw forwarder's p99"},
	{"list_containers_200_ratio", "ratio", 1.15, "ListContainers with 200 pods running, median crimux/direct"},
	{"list_containers_200_over_rawproxy_ratio", "ratio", 1.05, "ListContainers with 200 pods running, median crimux/raw forwarder"},
	{"list_sandboxes_200_ratio", "ratio", 1.15, "ListPodSandbox with 200 pods running, median crimux/direct"},
	{"pod_lifecycle_ratio", "ratio", 1.03, "runp→create→start→stop→rm→rmp of a busybox pod, median crimux/direct"},
	{"vm_start_overhead_ms", "ms", 100, "RunPodSandbox+CreateContainer+StartContainer minus overlay+define+start through libvirt, median of pairs"},
	{"vm_cold_create_ms", "ms", 1000, "CreateContainer of a VM whose image crimux never unpacked (the busybox test image: 13 MiB of gzip layers, 53 MiB of files since its kernel is uncompressed; 16 MiB of files before 2026-12-04), median"},
	{"vm_cold_create_tar_ms", "ms", 0, "tar -xzf of the same layer + sync, on the same disk, median"},
	{"vm_cold_create_over_tar_ratio", "ratio", 0, "vm_cold_create_ms / vm_cold_create_tar_ms"},
	{"vm_cold_create_1g_ms", "ms", 0, "the same for a 1 GiB raw disk of real data (the host's /usr files) in one gzip layer, median"},
	{"vm_cold_create_1g_tar_ms", "ms", 0, "tar -xzf of that layer + sync, on the same disk, median"},
	{"vm_cold_create_1g_over_tar_ratio", "ratio", 1.2, "vm_cold_create_1g_ms / vm_cold_create_1g_tar_ms"},
	{"vm_import_1g_s", "s", 0, "the 1 GiB bench image's disk (bigimage's data, as a qcow2) imported through crimux's code (rootvol: Capacity, Examine, DiskSize, Import: qcow2 create, import mark, qemu-img convert -n, mark cleared + fsync) into an empty 1126 MiB loop device (its blocks written once, untimed; its first MiB zeroed before each), median"},
	{"vm_import_1g_direct_s", "s", 0, "the same by hand into an equal loop device (a block volume like crimux's, not a plain file): qemu-img create -f qcow2 of the same size + qemu-img convert -n + fsync of the device, median"},
	{"vm_import_1g_ratio", "ratio", 1.2, "vm_import_1g_s over vm_import_1g_direct_s, median of the rounds' ratios (the paths alternate)"},
	{"vm_first_console_line_ms", "ms", 0, "RunPodSandbox to the initramfs marker in the CRI log, median"},
	{"vm_guest_ready_s", "s", 0, "Debian guest (own disk, cloud-init) through crimux: RunPodSandbox to the guest agent answering guest-ping, median"},
	{"vm_guest_ready_direct_s", "s", 0, "the same through libvirt directly: cidata ISO + overlay + define + start to guest-ping, median"},
	{"vm_guest_ready_ratio", "ratio", 1.05, "vm_guest_ready_s / vm_guest_ready_direct_s"},
	{"vm_instant_ready_s", "s", 3, "the same Debian guest pod asking for its template (annotation crimux.io/start: template; the template warmed first through the VM API): RunPodSandbox to the clone's guest agent answering guest-ping, median of the rounds restored from the template"},
	{"vm_instant_over_guest_ratio", "ratio", 0, "vm_instant_ready_s / vm_guest_ready_s of the same run (the cold boot of the same pod)"},
	{"vm_instant_burst_20_p50_s", "s", 0, "20 such pods started at once: RunPodSandbox to each clone's agent answering, p50 (one that booted cold counts as slowest)"},
	{"vm_instant_burst_20_p95_s", "s", 0, "the same, p95"},
	{"vm_instant_clone_rss_mib", "MiB", 0, "a clone's qemu 10 s after its agent answered: Rss (/proc/PID/smaps_rollup)"},
	{"vm_cold_guest_rss_mib", "MiB", 0, "the same of the cold-booted Debian guest pod"},
	{"vm_instant_clone_pss_mib", "MiB", 0, "a clone's qemu with the 20 of the burst running, 10 s after the last agent answered: Pss, median (pages shared between the clones, by KSM if the host runs it, count in part)"},
	{"vm_migrate_512m_total_s", "s", 0, "a running 512 MiB VM pod of the agent image moved live by crimux from node one to a target pod waiting on node two (the bed's second libvirtd): GetMigrationSource to FinishMigration's answer, median"},
	{"vm_migrate_direct_512m_total_s", "s", 0, "the same domain moved between the same two libvirtds with virsh migrate --live --p2p --copy-storage-inc, without crimux, median"},
	{"vm_migrate_over_direct_ratio", "ratio", 1.1, "vm_migrate_512m_total_s / vm_migrate_direct_512m_total_s"},
	{"vm_migrate_downtime_ms", "ms", 300, "libvirt's downtime of crimux's migrations (the guest paused on the source until it runs on the target), median"},
	{"vm_migrate_downtime_probe_ms", "ms", 300, "the same pause seen from the guest: a line printed to its serial console every 10 ms, from the last in the source pod's CRI log to the first in the target's, median"},
	{"load_status_idle_p99_ms", "ms", 0, "ContainerStatus through crimux asked by one client alone (a call every 5 ms, a VM's and a container's in turn), crimux idle, p99"},
	{"load_status_p99_ms", "ms", 0, "the same while 100 exec sessions run in VM guests and 200 CRI clients poll crimux, p99"},
	{"load_status_p99_over_idle_ratio", "ratio", 2, "load_status_p99_ms / load_status_idle_p99_ms"},
	{"load_status_vm_p99_over_idle_ratio", "ratio", 0, "for context, the two halves of load_status_p99_over_idle_ratio: the VMs' ContainerStatus alone (crimux's own answer, from its store), p99 under the load over p99 idle"},
	{"load_status_container_p99_over_idle_ratio", "ratio", 0, "the container's alone (crimux's proxy to containerd, containerd's answer), p99 under the load over p99 idle"},
	{"load_status_direct_p99_over_idle_ratio", "ratio", 0, "for context: the container's ContainerStatus on containerd's socket, p99 under the load over p99 idle"},
	{"load_exec_sessions", "count", 0, "exec sessions with a command running in a guest at once while ContainerStatus is timed under the load: the time the execs that worked spent in that window over its length (about 100 when none fail)"},
	{"load_exec_p50_ms", "ms", 0, "one exec of sh -c 'echo x; sleep 1' into a VM through crimux under the load, p50 (1 s of it is the sleep)"},
	{"load_exec_p99_ms", "ms", 0, "the same, p99"},
	{"load_errors", "count", 0, "calls that failed during the load phase, of any kind (exec sessions, the clients' lists and statuses, the probe); goal: none"},
	{"vm_burst_50_p50_s", "s", 0, "50 VM pods created at once, time to CONTAINER_RUNNING, p50"},
	{"vm_burst_50_p95_s", "s", 0, "50 VM pods created at once, time to CONTAINER_RUNNING, p95"},
	{"vm_burst_50_marker_p50_s", "s", 0, "50 VM pods created at once, time to the boot marker in the CRI log, p50"},
	{"vm_burst_50_p50_over_direct_ratio", "ratio", 1.05, "vm_burst_50_p50_s over the same burst through libvirt directly (until DomainCreate returned)"},
	{"vm_burst_50_p95_over_direct_ratio", "ratio", 1.05, "vm_burst_50_p95_s over the same burst through libvirt directly"},
	{"vm_burst_50_marker_p50_over_direct_ratio", "ratio", 1.05, "vm_burst_50_marker_p50_s over the direct burst's marker in libvirt's console log"},
	{"recovery_100_ms", "ms", 1000, "SIGKILL + restart with 50 VMs and 50 containers until ListContainers lists all 100, median"},
	{"rss_idle_mib", "MiB", 0, "crimux VmRSS, idle"},
	{"rss_100pods_mib", "MiB", 60, "crimux VmRSS with the 100 pods"},
	{"recovery_1000_ms", "ms", 1000, "SIGKILL + restart with 1,000 pods' records (running VMs, stopped VMs, container pods) until both lists are complete, median"},
	{"rss_1000pods_mib", "MiB", 80, "crimux VmRSS with the 1,000 pods"},
	{"list_containers_1000_ratio", "ratio", 1.15, "ListContainers with the 1,000 pods, median crimux/direct"},
	{"snapshot_create_ratio", "ratio", 0, "VM API CreateSnapshot vs libvirt snapshot-create directly, 128 MiB running VM, median ratio"},
	{"snapshot_restore_ratio", "ratio", 0, "VM API RestoreSnapshot vs libvirt snapshot-revert directly, median ratio"},
}

// Result is a measured figure with what it was computed from.
type Result struct {
	Value float64
	// Crimux and Direct describe the two sides (medians, quantiles).
	Crimux, Direct string
	Note           string
}

// Results collects figures as the phases measure them; a figure never
// measured stays NaN.
type Results struct {
	mu     sync.Mutex
	byName map[string]*Result
	// pictures are the charts drawn beside the table (pictures.go).
	pictures []picture
}

// NewResults has every figure of the catalogue, NaN.
func NewResults() *Results {
	r := &Results{byName: map[string]*Result{}}
	for _, f := range Catalogue {
		r.byName[f.Name] = &Result{Value: math.NaN()}
	}
	return r
}

// Set records a figure, replacing what an earlier attempt recorded (its
// notes included: notes about a value come after it).
func (r *Results) Set(name string, value float64, crimux, direct string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.entry(name) = Result{Value: value, Crimux: crimux, Direct: direct}
}

// Note adds a remark to a figure (why it is NaN, what it includes).
func (r *Results) Note(name, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.entry(name)
	if res.Note != "" {
		res.Note += "; "
	}
	res.Note += fmt.Sprintf(format, args...)
}

func (r *Results) entry(name string) *Result {
	res, ok := r.byName[name]
	if !ok {
		panic("bench: figure not in the catalogue: " + name)
	}
	return res
}

// Get is the figure's result so far.
func (r *Results) Get(name string) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.entry(name)
}

// Print writes one `BENCH <name> <value> <unit>` line per figure.
func (r *Results) Print(w io.Writer) {
	for _, f := range Catalogue {
		fmt.Fprintf(w, "BENCH %s %s %s\n", f.Name, FormatValue(r.Get(f.Name).Value), f.Unit)
	}
}

// FormatValue prints a figure with up to three decimals, NaN as NaN.
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// worst is the figure furthest over its goal (value/goal), or the
// closest to it when all are within.
func (r *Results) worst() (Figure, float64, bool) {
	var best Figure
	bestScore, found := math.Inf(-1), false
	for _, f := range Catalogue {
		v := r.Get(f.Name).Value
		if f.Goal == 0 || math.IsNaN(v) {
			continue
		}
		if score := v / f.Goal; score > bestScore {
			best, bestScore, found = f, score, true
		}
	}
	return best, bestScore, found
}
