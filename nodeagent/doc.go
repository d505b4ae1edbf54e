// Package nodeagent is crimux's node agent: inside the crimux daemon, it
// watches the pods bound to its node (a client-go informer with the field
// selector spec.nodeName=<node>) and applies the crimux.io/ annotations
// users set on a VM pod to that pod's VM, through crimux's own VM API
// (the vmapi server, called in-process). It is off unless [kubernetes]
// kubeconfig is set in crimux's config.
//
// # The annotation contract
//
// Requests, set by users (kubectl annotate pod NAME KEY=VALUE):
//
//	crimux.io/power-state: Running | Paused | Shutdown | Hibernate
//	crimux.io/reboot-request: <token>
//	crimux.io/snapshot-request: <snapshot name>
//	crimux.io/restore-request: <snapshot name>
//	crimux.io/snapshot-delete-request: <snapshot name>
//
// crimux.io/power-state is declarative (level-triggered): the agent
// compares it with the VM's power state and calls SetPowerState only when
// they differ, on every pass (pod changes, and a resync every few
// minutes), so a VM paused or shut down by other means is brought back to
// the declared state. Without the annotation the agent never changes the
// power state. A value that is not one of the four changes nothing and is
// reported. Values are case-sensitive.
//
// The four -request annotations are edge-triggered by value: each
// distinct value is done exactly once per pod, even across crimux
// restarts; to reboot again, set a new token (a time stamp will do); to
// take another snapshot, name a new one. An empty value is no request.
// Reboots are soft (the ACPI button), becoming a reset if the guest has
// not restarted after 30 s. The agent keeps, per pod UID, a record under
// <state_dir>/nodeagent/<uid>.json holding each kind's last value and its
// phase: "started" is written (atomically, fsynced) when the VM API is
// about to act — its checks passed, libvirt not asked yet
// (vmtypes.WithBeforeAct) — then "done" or "failed". A value found
// "started" after a
// restart (crimux stopped while it was under way) is not done again: it is
// reported as done, noting that crimux restarted meanwhile. A value
// already done or failed is reported again only if the pod has no result
// for it. The record goes when the pod is deleted (or, if that happened
// while crimux was down, at start-up).
//
// One pass over a pod acts in this order: power state, restore, delete,
// snapshot, reboot. The power state first, because it is the declared state the
// other actions start from (a reboot needs a running VM: power-state
// Running with a reboot-request boots the VM, then reboots it). Restore
// before snapshot, so that a snapshot asked for with a restore captures the
// restored VM (restore a base, branch off it under a new name) rather than
// the state being thrown away. Delete between the two: after the restore,
// so that one annotate can go back to a snapshot and drop it; before the
// snapshot, so that the place it frees under the VM's cap is there for the
// snapshot asked for with it (rotating at the cap in one pass). Reboot
// last, so the guest restarts on the disk and state it keeps. A restore returns the VM to the power state of
// its snapshot; if crimux.io/power-state says otherwise, the next pass
// (queued at once, with backoff) applies it.
//
// Results, written by the agent with a JSON merge patch of the pod's
// annotations, only when a value would change:
//
//	crimux.io/observed-power-state: <the VM's power state after the pass>
//	crimux.io/power-state-error: <annotation: value: why it was not applied>
//	crimux.io/reboot-result: <token>: rebooted (soft) | rebooted (hard ...) | failed: <message>
//	crimux.io/snapshot-result: <name>: created | failed: <message>
//	crimux.io/restore-result: <name>: restored (<power state>) | failed: <message>
//	crimux.io/snapshot-delete-result: <name>: deleted | failed: <message>
//	crimux.io/snapshots: [{"name":...,"created":<RFC 3339>,"description":...},...]
//
// A refusal is a failure like any other: a snapshot-request past the VM's
// cap of snapshots ([libvirt] max_snapshots_per_vm) is reported as
// "<name>: failed: ... its cap (libvirt.max_snapshots_per_vm = N): delete
// one first: resource exhausted", and, being failed, not taken up again:
// after deleting a snapshot (snapshot-delete-request, or crimuxctl vm
// snapshot delete), name a new one.
//
// crimux.io/snapshots lists the VM's snapshots, oldest first
// (kubeapi/snapshots.go has the format and its bounds), for kubectl
// crimux snapshot list. The agent lists them (ListSnapshots) on the first
// pass it makes over the pod after it starts, when the pod lacks the
// list, and after each restore, delete or snapshot that was done; not on
// other passes, so snapshots made or deleted on the node (crimuxctl) show
// after the next of these. A list that fails is tried on the next pass.
//
// observed-power-state is kept current on VM pods carrying any request
// annotation. power-state-error is removed once the VM is in the declared
// state (or the annotation is gone). Each action and each refusal is also
// a Kubernetes Event on the pod (source crimux, reporting controller
// crimux.io/node-agent, instance the node's name): Normal
// PowerStateChanged, Rebooted, SnapshotCreated, SnapshotRestored,
// SnapshotDeleted; Warning InvalidPowerState, PowerStateFailed,
// RebootFailed, SnapshotFailed, RestoreFailed, SnapshotDeleteFailed,
// NotAVM. Events go out once a pass's patch is written; a
// result reported again after an outage is announced again.
//
// The agent also records the VM runtime's word on a guest's boot
// (guestboot.go): Warning GuestNotBooted when a VM pod's guest showed no
// sign of an operating system within [libvirt] guest_boot_timeout, Normal
// GuestBooted when it shows itself later. These need no annotation.
//
// Pods without request annotations are never looked at further (no VM API
// call). A container pod that carries them is told it is not a VM
// (NotAVM, the errors and results above); a VM pod whose VM does not run
// yet is retried with backoff.
//
// # Live migration
//
// A VMMigration (kubectl crimux migrate, or a drain) moves a VM pod's VM
// to a new pod T on another node through the two nodes' agents;
// crimux-controller copies each agent's answer to the other pod (kubeapi/migration.go has the nine steps,
// keys and JSON values). crimux.io/migrate-to on the source pod S and
// crimux.io/migrate-from on T are requests like the others. S's agent
// writes migration-source (GetMigrationSource, for the target named;
// a refusal is migration-result Failed with no token, asked again on
// S's next pass), then, once T's migration-target for S is copied to
// it, calls Migrate once per token, in a goroutine of its own (the
// worker goes on), recorded started in S's record before the call;
// migration-progress at most every 2 s; migration-result at its end.
// A token found started after a restart is not migrated again: the
// migration ended with the crimux that ran it, and it is reported Failed
// if the VM runs on in S, else Succeeded, for T's FinishMigration to
// confirm (a VM that arrived is never reported failed, or T, where it
// runs, would be deleted). T's agent calls PrepareMigration once S's
// description is copied and T's container runs, waiting (retried with
// backoff until then), once per pod (migration-target, or
// migration-result Failed with no token); then FinishMigration once per
// token, told S's result (migration-finish). Every answer names what it
// answers (target, source, token): one left from another attempt is
// ignored. Until its VM has arrived (its finish Succeeded, or, moved
// without the agents, its domain running) T's power-state, requests and
// observed-power-state are held: the VM API reports a waiting target
// Running. Events: Normal MigrationStarted, Migrated (S),
// MigrationPrepared, MigrationArrived (T); Warning MigrationFailed.
//
// # When the API server is down
//
// VMs keep running: the agent acts only on what it reads from the API
// server and never because it cannot reach it. The informer re-lists when
// the server is back; failed patches are retried through the workqueue's
// rate limiter. Because the power state is compared before acting and
// request values are recorded, nothing is applied twice, and changes made
// meanwhile are applied once the server answers.
//
// Files: agent.go (the informer, the queue, the worker), informer.go
// (list-watch and event handlers), reconcile.go (one pass over a pod),
// power.go and requests.go (the two kinds of request), snapshots.go (the
// list of snapshots), migrate*.go (live
// migration: the protocol, a source's steps, its Migrate goroutine, a
// target's steps), records.go (the
// per-pod records), sent.go (patches the informer has not shown yet),
// kube.go (the Kubernetes writes), coreclient.go (its core/v1 client,
// not client-go's typed one), vms.go (the VM API subset used).
package nodeagent
