// Package placer puts each new qemu process of a crimux VM into its VM's
// cgroup (package cgroup makes the leaf) before qemu runs, and hands it the
// files it needs from crimux (its NIC's tap). It is the server side of the
// protocol in package placement; cmd/crimux-qemu-wrapper is the client.
//
// # How qemu gets there
//
// This is the one recipe of the four measured on the test bed (libvirt
// 9.0, qemu 7.2, Debian 12) that held through start, suspend/resume,
// reset, vCPU hotplug, snapshot revert and managed-save restore:
//
//   - libvirt's own cgroup handling is off: cgroup_controllers = [ ] in
//     /etc/libvirt/qemu.conf (as KubeVirt does; global to that libvirtd).
//     Otherwise libvirt moves qemu to /machine/… and its vCPU threads into
//     its own vcpuN children after start.
//   - every crimux domain's <emulator> is cmd/crimux-qemu-wrapper. libvirt
//     runs it, as the qemu user, wherever it would run qemu; for a domain
//     named crimux-* it connects to the Placer's unix socket, sends the
//     domain name and blocks. The Placer (root, in crimux) learns the
//     caller's pid from SO_PEERCRED, checks that the caller's own command
//     line says `-name guest=<that name>` (and, when configured, its uid
//     and executable), looks the VM's Spec up, creates the leaf if missing
//     and writes the pid to cgroup.procs of the leaf in every hierarchy,
//     the unified one included, then checks /proc/<pid>/cgroup and answers
//     "ok". Only then does the wrapper exec qemu, so every thread and child
//     qemu ever makes starts in the pod. A refusal, or no answer within
//     30 s, makes the wrapper exit non-zero: qemu never runs outside the
//     pod, and the reason shows in virsh's error ("qemu unexpectedly closed
//     the monitor: crimux-qemu-wrapper: …") and the domain log.
//   - the answer may also hand qemu open files and the arguments naming
//     them ("ok <n>", n argument lines, the files as SCM_RIGHTS; see
//     package placement): WithAttach. This is how a VM gets its NIC — a tap
//     crimux opened inside the pod's network namespace
//     (runtimes/libvirt/podnet) — although qemu runs in the host's.
//
// What it costs: virsh schedinfo, memtune and blkiotune fail; libvirt
// applies no device cgroup (libvirt's private /dev namespace for qemu
// stays). The limits are crimux's to set and update (Create, Update).
//
// # Measured here (Debian 12, libvirt 9.0, qemu 7.2, v1 hybrid, TCG)
//
//   - The wrapper adds ~3–20 ms to a start; a 2-vCPU domain's qemu had all 5–9
//     threads (main, workers, IO mon_iothread, "CPU n/TCG") on every line of
//     /proc/<pid>/task/*/cgroup at the leaf, `0::` included, after start,
//     suspend/resume, setvcpus --live, snapshot-revert and managedsave+start.
//   - snapshot-revert of a running domain and start after managedsave both
//     ran a new qemu process (new pid), placed again through the wrapper.
//   - libvirt waits as long as the wrapper does (no earlier monitor
//     timeout): with no Placer, virsh start failed after the wrapper's 30 s
//     with its message; a Placer started 3 s late still got the VM started.
//   - A 50% quota held (0.87 s of CPU in 2 s while the guest booted); peak
//     memory of a 128 MiB TCG guest's cgroup was ~177 MiB across boot,
//     snapshot and save/restore.
//
// # Surprises and traps
//
//   - In hybrid mode the unified hierarchy offers no cpu or memory (only
//     hugetlb here): every limit goes to v1, and the unified leaf serves
//     placement (the `0::` line) and cpu.stat only. Each limit is written
//     where its controller lives, so a hybrid host with a controller left
//     to the unified hierarchy works too.
//   - This host mounts cpu and cpuacct separately, not as the usual
//     cpu,cpuacct: hence no reliance on containerd's Default() layout.
//   - libvirt clears qemu's environment: the wrapper's socket path is fixed
//     (or baked in with -ldflags); CRIMUX_PLACEMENT_SOCKET only arrives
//     through <qemu:env>, which taints the domain (custom-argv): tests only.
//   - The socket's directory must be searchable by the qemu user (a 0700
//     t.TempDir is not); the socket is 0666, SO_PEERCRED keeps strangers
//     out.
//   - libvirt caches qemu's capabilities keyed by the <emulator>'s ctime:
//     after a qemu upgrade the wrapper must be reinstalled or touched
//     (test/bed/libvirt-up.sh does when qemu is newer than the wrapper).
//   - libvirt 9.0 cannot revert an internal snapshot taken after a live
//     vCPU hotplug (the new qemu starts with the persistent vCPU count and
//     loadvm fails); not a cgroup matter, but the VM runtime will meet it.
//   - On a systemd host, libvirt registers each new qemu with
//     systemd-machined (when installed: Debian's libvirt-daemon-system
//     pulls it in) whatever cgroup_controllers says, and the wrapper starts
//     in machine.slice/machine-qemu\x2d<N>\x2d<domain>.scope rather than
//     in libvirtd's cgroup: that scope, of that domain only, is accepted
//     too (origin.go). Pure v2 with systemd-driver parents is tested on the
//     node make e2e-node boots (test/node).
//   - Untested here: AppArmor/SELinux confinement of qemu (a profile must allow the
//     wrapper to connect to the socket and exec qemu), and crimux inside a
//     cgroup namespace (/proc/<pid>/cgroup paths would be relative to it).
package placer
