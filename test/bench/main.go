// Command bench measures what crimux costs over the direct path, on this
// machine, in one run: each figure through crimux and against containerd's
// socket or libvirt directly, alternating so that drift in the host's load
// lands on both sides alike. It prints one `BENCH <name> <value> <unit>`
// line per figure (NaN for one it could not measure: figures never fail
// the run), writes them as a table into docs/benchmarks.md between the
// bench markers, and writes every sample in the Go benchmark format, for
// benchstat (`benchstat -col /path samples.txt`).
//
// `make bench` builds crimux, brings the test bed up and runs this with
// the default counts. Smaller counts for development:
//
//	bench -rpc-calls 200 -list-pods 20 -lifecycle-rounds 4 -vm-rounds 2 -burst 5 ...
//
// It starts its own crimux (state dir under /var/lib, mode 0711, so that
// qemu, running as libvirt-qemu, can reach the VMs' files) and removes
// everything it made: pods, domains, cgroups, state and log directories.
// Phases that need neither (-phases import) run without either.
// This package runs the phases: main.go (flags, phases), bench.go (set-up,
// cleanup), containers.go, vms.go, burst.go, recovery.go, vmimport.go, load*.go, instant*.go, migrate*.go (the figures),
// scale.go (the pods of the 1,000-pod figures), cri.go and vmpods.go (pods
// through CRI). Its subpackages own the rest: daemon (the
// crimux process, the bench's qemu wrapper), criclient (the CRI
// connections), rawproxy (the raw-bytes forwarder: the hop alone, the
// third path of the rpc and lists phases, in a process of its own),
// libvirtdirect (libvirt directly: the VMs' baseline),
// cgroups (the VM pods' cgroups), runs (a run's name, the sweep of dead
// runs' leftovers), stats (quantiles, alternation), loadgen (the load
// phase's paced workers and tallies), machine (machine
// facts, versions) and report (the figures' names and goals, results,
// BENCH lines, the Markdown and its SVG pictures).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/crimux/crimux/test/bench/criclient"
	"github.com/crimux/crimux/test/bench/daemon"
	"github.com/crimux/crimux/test/bench/machine"
	"github.com/crimux/crimux/test/bench/rawproxy"
	"github.com/crimux/crimux/test/bench/report"
	"github.com/crimux/crimux/test/bench/runs"
)

// options are the flags; the defaults are make bench's counts.
type options struct {
	crimuxBin, wrapper, containerd, out, samples, logDir, phases string
	vmNetwork                                                    string

	rpcCalls, listPods, listCalls, lifecycleRounds, vmRounds, vmMiB     int
	coldRounds, coldBigRounds                                           int
	guestRounds                                                         int
	instantRounds, instantBurst                                         int
	migrateRounds, migrateBandwidthMiB                                  int
	importRounds                                                        int
	snapshotRounds, burst, burstMiB, recoveryContainers, recoveryRounds int
	burstRootWeight                                                     int
	workers                                                             int
	scalePods, scaleStoppedVMs                                          int
	loadVMs, loadSessions, loadClients                                  int
	loadClientPeriod, loadIdle, loadDuration                            time.Duration
	loadExecSync                                                        bool
	// crimux's caps of guest-agent calls in flight (0: its defaults)
	agentCallsPerVM, agentCallsPerNode int
	sweepOnly                          bool
	// The run's own containerd (test/bench/ctd), from the bed's binary
	// and config; -containerd is then the bed's, for the sweep only.
	ownContainerd                   bool
	containerdBin, containerdConfig string
	// The raw forwarder (test/bench/rawproxy): the bench's own process
	// serves it with serveRawProxy set.
	serveRawProxy     string
	rawProxyInProcess bool
	// The load phase's probe: the bench runs itself so with
	// serveLoadProbe set (load_probe.go), unless loadProbeInProcess.
	serveLoadProbe     string
	loadProbeInProcess bool
}

// counts are the counts the report states.
func (o options) counts() report.Counts {
	return report.Counts{
		RPCCalls: o.rpcCalls, ListPods: o.listPods, ListCalls: o.listCalls, LifecycleRounds: o.lifecycleRounds,
		VMRounds: o.vmRounds, VMMiB: o.vmMiB, SnapshotRounds: o.snapshotRounds, Burst: o.burst, BurstMiB: o.burstMiB,
		RecoveryContainers: o.recoveryContainers, RecoveryRounds: o.recoveryRounds,
		LoadVMs: o.loadVMs, LoadSessions: o.loadSessions, LoadClients: o.loadClients,
	}
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.crimuxBin, "crimux", "bin/crimux", "crimux binary to measure")
	flag.StringVar(&o.wrapper, "wrapper", "", "crimux-qemu-wrapper built for the bench's placement socket "+daemon.PlacementSocket+
		"; installed as "+daemon.Wrapper+" so that other crimux daemons on the host cannot take the VMs' placement (\"\": the bed's wrapper and socket)")
	flag.StringVar(&o.containerd, "containerd", "unix:///run/crimux-testbed/containerd/containerd.sock", "the bed's containerd CRI endpoint: the direct path with -own-containerd=false; the sweep of earlier runs' pods")
	flag.BoolVar(&o.ownContainerd, "own-containerd", true, "run a containerd of the run's own (the bed's binary and config, its own root, state and socket) for both paths, killed with its pods at the end (removing 700 pods one by one took 3 minutes here); false: the bed's at -containerd")
	flag.StringVar(&o.containerdBin, "containerd-bin", "/opt/crimux-testbed/bin/containerd", "the bed's containerd binary, for -own-containerd")
	flag.StringVar(&o.containerdConfig, "containerd-config", "/etc/crimux-testbed/containerd/config.toml", "the bed's containerd config, for -own-containerd")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "Markdown file whose bench section is rewritten (\"\": none)")
	flag.StringVar(&o.samples, "samples", "/run/crimux-testbed/bench/samples.txt", "every sample, in the Go benchmark format (\"\": none)")
	flag.StringVar(&o.logDir, "log-dir", "/run/crimux-testbed/bench", "where crimux's log of the run is kept")
	flag.StringVar(&o.vmNetwork, "vm-network", "cni", "VM pods' network in crimux's config: \"cni\" (a pod IP, a NIC on a tap, crimux's DHCP responder; the direct path's VMs get a NIC too) or \"none\" (no NIC on either path: what the pod network costs the VM figures)")
	flag.StringVar(&o.phases, "phases", "all", "comma-separated phases to run: "+strings.Join(phaseNames(), ","))
	flag.IntVar(&o.rpcCalls, "rpc-calls", 2000, "calls per path for the small RPC figures")
	flag.IntVar(&o.listPods, "list-pods", 200, "pods running for the list figures")
	flag.IntVar(&o.listCalls, "list-calls", 500, "list calls per path (a list takes 1-5 ms: 500 keep the median steady)")
	flag.IntVar(&o.lifecycleRounds, "lifecycle-rounds", 20, "pod lifecycle rounds per path")
	flag.IntVar(&o.vmRounds, "vm-rounds", 6, "VM start rounds per path (few enough that the run, with the 1 GiB image, the raw forwarder, the direct burst and 1,000 pods, stays within 15 minutes)")
	flag.IntVar(&o.coldRounds, "cold-rounds", 3, "cold-image CreateContainer rounds (crimux restarted with an empty image cache each)")
	flag.IntVar(&o.coldBigRounds, "cold-big-rounds", 2, "the same with the 1 GiB image (made once, about a minute, kept in the bed's registry); 0: none")
	flag.IntVar(&o.guestRounds, "guest-rounds", 1, "Debian guest boots per path (30-40 s each under TCG; 2 take the run past 15 minutes on a slow day)")
	flag.IntVar(&o.instantRounds, "instant-rounds", 5, "Debian guest pods restored from their template, one at a time (instant.go: seconds each; the template is made once before them, minutes under TCG)")
	flag.IntVar(&o.instantBurst, "instant-burst", 20, "Debian guest pods restored from their template at once (2 vCPUs, 1 GiB each)")
	flag.IntVar(&o.migrateRounds, "migrate-rounds", 3, "live migrations of a 512 MiB agent VM from node one to node two per path (migrate.go: the guest's boot, 10-40 s under TCG, and seconds of migration each)")
	flag.IntVar(&o.migrateBandwidthMiB, "migrate-bandwidth-mib", -1, "the memory stream's cap of both paths in the migrate phase, MiB/s: node one's libvirt.migration.bandwidth_mib and virsh migrate --bandwidth (-1: crimux's default, 64; 0: no cap)")
	flag.IntVar(&o.importRounds, "import-rounds", 5, "imports of the 1 GiB disk into an empty loop device per path (vmimport.go: 1-4 s each; 3 were too few on a busy host)")
	flag.IntVar(&o.vmMiB, "vm-mib", 128, "memory of the VMs that boot (start, console, snapshots)")
	flag.IntVar(&o.snapshotRounds, "snapshot-rounds", 3, "snapshot create+restore rounds per path")
	flag.IntVar(&o.burst, "burst", 50, "VM pods created at once")
	flag.IntVar(&o.burstMiB, "burst-mib", 128, "memory of each burst VM (the test kernel needs 128 MiB to boot)")
	flag.IntVar(&o.burstRootWeight, "burst-root-weight", 0, "CPU weight of the bench's root cgroup during the burst, in tasks (1024 cpu.shares each), where both paths' guests run (crimux's in their pods' cgroups, the direct path's placed beside them); 0: the host's CPUs, as kubelet weighs its pods' root by the node's allocatable CPU")
	flag.IntVar(&o.recoveryContainers, "recovery-containers", 50, "container pods kept running for the recovery and RSS figures")
	flag.IntVar(&o.recoveryRounds, "recovery-rounds", 3, "SIGKILL+restart rounds")
	flag.IntVar(&o.scalePods, "scale-pods", 1000, "pods crimux keeps for the scale figures (recovery, RSS, ListContainers): "+
		"the container pods, the burst VMs, stopped VM pods and pause-only pods up to this (0: none)")
	flag.IntVar(&o.scaleStoppedVMs, "scale-stopped-vms", 250, "of the scale pods, VM pods defined but not started "+
		"(the rest are pause-only pods, which cost a host 3-4 times as much to make and remove, but each VM pod adds to crimux's recovery: docs/benchmarks.md, 2026-12-03 16:30)")
	flag.IntVar(&o.loadVMs, "load-vms", 4, "VM pods of the agent image the load phase's exec sessions go into (TCG guests: few, on 2 cores)")
	flag.IntVar(&o.loadSessions, "load-exec-sessions", 100, "exec sessions the load phase keeps running, spread over -load-vms guests")
	flag.IntVar(&o.loadClients, "load-clients", 200, "CRI clients of the load phase, each on a connection of its own")
	flag.DurationVar(&o.loadClientPeriod, "load-client-period", time.Second, "how often each load client polls (ListPodSandbox, ListContainers, a ContainerStatus): kubelet's relist period")
	flag.DurationVar(&o.loadIdle, "load-idle", 20*time.Second, "how long the load phase times ContainerStatus with crimux idle")
	flag.DurationVar(&o.loadDuration, "load-duration", 60*time.Second, "how long the load phase times ContainerStatus under the load")
	flag.BoolVar(&o.loadExecSync, "load-exec-sync", false, "the load's exec sessions use ExecSync (an exec probe's path) instead of Exec and the streaming server (kubectl exec's)")
	flag.BoolVar(&o.loadProbeInProcess, "load-probe-in-process", false, "the load phase's probe runs in the bench's process, sharing its scheduler with the load it measures (as before 2026-12-06), not in a process of its own as kubelet does")
	flag.StringVar(&o.serveLoadProbe, probeFlag, "", "internal: only run the load phase's probe for the window asked (JSON), its samples to stdout (the bench runs itself so)")
	flag.IntVar(&o.agentCallsPerVM, "agent-calls-per-vm", 0, "crimux's libvirt.agent_calls_per_vm (0: its default); what the cap costs the load phase's exec sessions")
	flag.IntVar(&o.agentCallsPerNode, "agent-calls-per-node", 0, "crimux's libvirt.agent_calls_per_node (0: its default)")
	flag.IntVar(&o.workers, "workers", 6, "parallel CRI calls when making or removing many pods")
	flag.BoolVar(&o.sweepOnly, "sweep", false, "only remove what earlier runs left behind (every run does this first), then exit")
	flag.StringVar(&o.serveRawProxy, rawproxy.ServeFlag, "", "internal: only serve the raw forwarder on this socket, in front of -containerd (the bench runs itself so)")
	flag.BoolVar(&o.rawProxyInProcess, "rawproxy-in-process", false,
		"run the raw forwarder in the bench's process instead of a process of its own (faster than any separate daemon can be: for comparison)")
	flag.Parse()
	return o
}

// phase is one part of the run and the figures it owns; a phase that
// fails is run once more if retry is set (the bed is shared: other users'
// tests can kill the bench's pods).
type phase struct {
	name    string
	run     func(*bench, context.Context) error
	figures []string
	retry   bool
}

var phases = []phase{
	{"rpc", (*bench).phaseRPC, []string{"rpc_version_p50_overhead_us", "rpc_version_p99_overhead_us",
		"rpc_containerstatus_p50_overhead_us", "rpc_containerstatus_p99_overhead_us",
		"rpc_containerstatus_p50_over_rawproxy_us", "rpc_containerstatus_p99_over_rawproxy_us"}, true},
	{"lifecycle", (*bench).phaseLifecycle, []string{"pod_lifecycle_ratio"}, true},
	{"lists", (*bench).phaseLists, []string{"list_containers_200_ratio", "list_sandboxes_200_ratio",
		"list_containers_200_over_rawproxy_ratio"}, true},
	{"coldimage", (*bench).phaseColdImage, []string{"vm_cold_create_ms", "vm_cold_create_tar_ms", "vm_cold_create_over_tar_ratio",
		"vm_cold_create_1g_ms", "vm_cold_create_1g_tar_ms", "vm_cold_create_1g_over_tar_ratio"}, true},
	{"import", (*bench).phaseImport, importFigures, true},
	{"vmstart", (*bench).phaseVMStart, []string{"vm_start_overhead_ms", "vm_first_console_line_ms"}, false},
	{"snapshots", (*bench).phaseSnapshots, []string{"snapshot_create_ratio", "snapshot_restore_ratio"}, true},
	{"guest", (*bench).phaseGuest, []string{"vm_guest_ready_s", "vm_guest_ready_direct_s", "vm_guest_ready_ratio"}, false},
	// After guest: its vm_guest_ready_s is the instant ratio's cold side.
	{"instant", (*bench).phaseInstant, instantFigures, false},
	{"migrate", (*bench).phaseMigrate, migrateFigures, false},
	{"load", (*bench).phaseLoad, loadFigures, false},
	{"burst", (*bench).phaseBurst, []string{"vm_burst_50_p50_s", "vm_burst_50_p95_s", "vm_burst_50_marker_p50_s",
		"vm_burst_50_p50_over_direct_ratio", "vm_burst_50_p95_over_direct_ratio", "vm_burst_50_marker_p50_over_direct_ratio"}, false},
	{"recovery", (*bench).phaseRecovery, []string{"recovery_100_ms", "rss_100pods_mib",
		"recovery_1000_ms", "rss_1000pods_mib", "list_containers_1000_ratio"}, true},
}

func phaseNames() []string {
	var names []string
	for _, p := range phases {
		names = append(names, p.name)
	}
	return names
}

func main() {
	os.Exit(run(parseFlags()))
}

// run returns non-zero only when the bench could not run at all (no test
// bed, no crimux); a figure that fails is NaN with a note.
func run(o options) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	selected, err := selectPhases(o.phases)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if o.sweepOnly {
		return sweepOnly(ctx, o)
	}
	if o.serveLoadProbe != "" {
		if err := serveProbe(ctx, o.serveLoadProbe); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	if o.serveRawProxy != "" {
		if err := rawproxy.Serve(ctx, o.serveRawProxy, o.containerd); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	var b *bench
	standalone := !needsDaemon(selected)
	if standalone { // no crimux, no bed: nothing to clean up either
		b = &bench{opts: o, started: time.Now(), res: report.NewResults(), host: machine.Gather(o.crimuxBin)}
	} else if b, err = setUp(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		if b != nil {
			b.cleanup()
		}
		return 1
	}
	for _, p := range selected {
		if ctx.Err() != nil {
			break
		}
		b.runPhase(ctx, p)
	}
	if !standalone {
		b.cleanup()
	}
	b.recordProbes()
	b.finish()
	b.res.Print(os.Stdout)
	return 0
}

// runPhase runs one phase (twice if it may be retried and failed); a
// figure the phase failed to measure gets a note saying why.
func (b *bench) runPhase(ctx context.Context, p phase) {
	b.logf("phase %s (%s)", p.name, b.probeHost())
	start := time.Now()
	err := p.run(b, ctx)
	if err != nil && p.retry && ctx.Err() == nil && !errors.Is(err, errVMAPIMissing) {
		b.logf("phase %s: %v; running it again", p.name, err)
		err = p.run(b, ctx)
	}
	if err != nil {
		b.logf("phase %s: %v", p.name, err)
		for _, f := range p.figures {
			if v := b.res.Get(f).Value; v != v { // NaN: not measured
				b.res.Note(f, "not measured: %v", err)
			}
		}
	}
	b.logf("phase %s took %s", p.name, time.Since(start).Round(100*time.Millisecond))
}

func sweepOnly(ctx context.Context, o options) int {
	ctd, err := criclient.Dial("containerd", o.containerd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer ctd.Close()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }
	if err := runs.Sweep(ctx, ctd, logf); err != nil {
		logf("sweep: %v", err)
		return 1
	}
	return 0
}

func selectPhases(list string) ([]phase, error) {
	if list == "all" {
		return phases, nil
	}
	var out []phase
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, p := range phases {
			if p.name == name {
				out, found = append(out, p), true
			}
		}
		if !found {
			return nil, fmt.Errorf("-phases: unknown phase %q (have %s)", name, strings.Join(phaseNames(), ","))
		}
	}
	return out, nil
}
