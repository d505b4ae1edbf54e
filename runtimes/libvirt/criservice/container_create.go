package criservice

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/converter/cloudinit"
	"github.com/crimux/crimux/converter/vm"
	"github.com/crimux/crimux/converter/vm/crifields"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/tenantfs"
	"github.com/crimux/crimux/runtimes/libvirt/cidata"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/hostcaps"
	"github.com/crimux/crimux/runtimes/libvirt/opguard"
	"github.com/crimux/crimux/runtimes/libvirt/resize"
	"github.com/crimux/crimux/runtimes/libvirt/rootvol"
	"github.com/crimux/crimux/runtimes/libvirt/store"
	"github.com/crimux/crimux/runtimes/libvirt/vmfiles"
	"github.com/crimux/crimux/runtimes/libvirt/vmidentity"
	"github.com/crimux/crimux/runtimes/libvirt/vmstorage"
)

// CreateContainer makes the pod's VM: it checks the request, reads the
// image's disk and/or kernel, makes the VM's overlay disk and defines the
// libvirt domain. A VM pod has exactly one container. Every step made is
// undone if a later one fails, so nothing is left behind.
func (r *Service) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (_ *runtimeapi.CreateContainerResponse, retErr error) {
	// A field the VM runtime refuses (a command, privileged, a CDI
	// device: converter/vm/crifields) is refused before anything, the
	// pod's lock included.
	if err := crifields.Refuse(req); err != nil {
		return nil, err
	}
	if err := r.RequireRoom("CreateContainer"); err != nil {
		return nil, err
	}
	defer r.Locks.Lock(req.GetPodSandboxId())()
	sb, err := r.Store.LiveSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	others, err := r.Store.ContainersOf(sb.ID)
	if err != nil {
		return nil, err
	}
	if err := checkCanCreate(sb, req.GetConfig(), others); err != nil {
		return nil, err
	}
	plan, err := r.planVM(ctx, sb, req.GetConfig())
	if err != nil {
		return nil, err
	}
	if plan.rec.Migration != nil && len(others) > 0 {
		return nil, fmt.Errorf("pod sandbox %q: a migration target gets one attempt (its disk may hold part of a failed migration): delete the pod and migrate again: %w",
			sb.ID, errdefs.ErrFailedPrecondition)
	}
	if plan.spec.Identity, err = r.identityOf(sb); err != nil {
		return nil, err
	}
	var undo opguard.Rollback
	defer func() {
		if retErr != nil {
			undo.Run(r.Log)
		}
	}()
	// Intent first: the record names every resource before one exists.
	plan.rec.Creating = true
	if err := r.Store.PutContainer(plan.rec); err != nil {
		return nil, err
	}
	undo.Add("container record", func() error { return r.Store.DeleteContainer(plan.rec.ID) })
	release, err := r.makeVMFiles(ctx, sb, plan, &undo)
	defer release()
	if err != nil {
		return nil, err
	}
	if err := r.defineDomain(plan, &undo); err != nil {
		return nil, err
	}
	if err := r.finishCreate(ctx, sb, plan); err != nil {
		return nil, err
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: plan.rec.ID}, nil
}

// finishCreate carries the pod's snapshots over to the new VM, clears the
// record's intent and makes the VM the pod's container.
func (r *Service) finishCreate(ctx context.Context, sb *store.Sandbox, plan *vmPlan) error {
	if plan.reuseDisk {
		r.RootDisks.CarryPodSnapshots(sb, plan.rec)
	}
	r.RootDisks.GiveVolumeSnapshots(ctx, plan.rec, plan.rootImported)
	plan.rec.Creating = false
	if err := r.Store.PutContainer(plan.rec); err != nil {
		return err
	}
	sb.ContainerID = plan.rec.ID
	if err := r.Store.PutSandbox(sb); err != nil {
		return err
	}
	r.Events.Publish(r.Event(plan.rec, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT))
	r.Log.Info("VM created", "sandbox", sb.ID, "container", plan.rec.ID, "domain", plan.rec.Domain,
		"vcpus", plan.rec.VCPUs, "memory_mib", plan.rec.MemoryMiB, "accel", plan.rec.Accel, "template", plan.rec.Clone.GetKey())
	r.clones().NoteCold(plan.rec.ID, plan.cold)
	return nil
}

// checkCanCreate enforces one VM per ready pod. A VM that has exited may
// be replaced (kubelet restarting the pod's container), one that has not
// may not.
func checkCanCreate(sb *store.Sandbox, cfg *runtimeapi.ContainerConfig, others []*store.Container) error {
	if cfg.GetImage().GetImage() == "" {
		return errdefs.Invalid("config.image.image", "must not be empty")
	}
	if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		return fmt.Errorf("pod sandbox %q is not ready: %w", sb.ID, errdefs.ErrFailedPrecondition)
	}
	if sb.MigratedAway {
		return fmt.Errorf("pod sandbox %q: its VM moved to another node by live migration; its disk is the VM's past and boots no more: delete the pod: %w",
			sb.ID, errdefs.ErrFailedPrecondition)
	}
	for _, o := range others {
		if o.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("pod sandbox %q already has container %q: a VM pod runs exactly one container (the VM): %w",
				sb.ID, o.ID, errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}

// vmPlan is what CreateContainer will make, decided before anything is.
type vmPlan struct {
	rec    *store.Container
	spec   vm.Spec
	layout core.ImageLayout
	// cidata are the cloud-init volume's files (cidata.go).
	cidata cloudinit.Files
	// reuseDisk: the VM boots its pod's existing root disk (RootDisks).
	reuseDisk bool
	// root is the volume the root disk is on (RootDisks), nil for the
	// pod's overlay; rootImported: the image was imported into it.
	root         *vm.RootVolume
	rootImported bool
	// cold says why a VM that asked for its template boots (clones.go).
	cold string
}

// planVM validates the container config and reads the image: everything
// that can be refused is refused here, before anything exists.
func (r *Service) planVM(ctx context.Context, sb *store.Sandbox, cfg *runtimeapi.ContainerConfig) (*vmPlan, error) {
	in, err := r.readRequest(sb, cfg)
	if err != nil {
		return nil, err
	}
	layout, err := r.Images.Prepare(ctx, cfg.GetImage().GetImage())
	if err != nil {
		return nil, err
	}
	if err := r.checkDiskSize(cfg.GetImage().GetImage(), layout, in.root); err != nil {
		return nil, err
	}
	rec := r.newRecord(sb, cfg, in.res, layout)
	spec := r.specOf(sb, rec, in, layout)
	files, err := cidata.FilesFor(sb, in.ci, in.storage.Shares)
	if err != nil {
		return nil, err
	}
	spec.CIData = filepath.Join(rec.Dir, cidata.File)
	p := &vmPlan{rec: rec, spec: spec, layout: layout, cidata: files, root: in.root}
	if in.opts.MigrateFrom != "" && !sb.Arrived {
		return p, r.arrivals().PlanIncoming(rec, in.opts, in.storage)
	}
	p.cold = r.planClone(sb, p, in)
	return p, nil
}

// vmRequest is what the pod and container configs ask of the VM, checked.
type vmRequest struct {
	res     vm.Resources
	opts    vm.Options
	ci      cloudinit.Source
	storage vm.Storage
	// root is the volume the root disk is on; nil for the pod's overlay.
	root *vm.RootVolume
}

// readRequest checks the configs' resources, annotations, cloud-init,
// mounts and log path, and where the root disk goes.
func (r *Service) readRequest(sb *store.Sandbox, cfg *runtimeapi.ContainerConfig) (in vmRequest, err error) {
	if in.res, err = vm.ResourcesFrom(cfg.GetLinux().GetResources()); err != nil {
		return in, err
	}
	if in.res, err = resize.FitMemory(r.Cgroups, r.Opts, r.Log, sb.Config.GetLinux().GetCgroupParent(), in.res); err != nil {
		return in, err
	}
	if err := hostcaps.CheckHugePages(in.res.HugePages); err != nil {
		return in, err
	}
	if in.opts, err = vm.ParseAnnotations(sb.Config.GetAnnotations(), cfg.GetAnnotations()); err != nil {
		return in, err
	}
	if in.ci, err = cloudinit.FromPod(sb.Config.GetAnnotations(), cfg.GetAnnotations(), cfg.GetMounts(), tenantfs.ReadBeneath); err != nil {
		return in, err
	}
	storage, err := vmstorage.Of(cfg)
	if err != nil {
		return in, err
	}
	if in.root, in.storage, err = r.RootDisks.PlanRootVolume(sb, cfg, storage); err != nil {
		return in, err
	}
	if err := vmstorage.CheckHost(in.storage); err != nil {
		return in, err
	}
	if cfg.GetLogPath() != "" && sb.Config.GetLogDirectory() == "" {
		return in, errdefs.Invalid("config.log_path", "is set but the pod has no log_directory")
	}
	return in, nil
}

// newRecord is the container record of the VM to make, in state CREATED.
func (r *Service) newRecord(sb *store.Sandbox, cfg *runtimeapi.ContainerConfig, res vm.Resources, layout core.ImageLayout) *store.Container {
	id := core.NewID()
	rec := &store.Container{
		ID: id, SandboxID: sb.ID, Config: cfg, ImageRef: cfg.GetImage().GetImage(), ImageDigest: layout.Digest,
		Domain: vm.DomainName(id), Dir: r.VMDir(id), VCPUs: res.VCPUs, MemoryMiB: res.MemoryMiB, Accel: r.Accel,
		BootMemoryMiB: res.MemoryMiB,
		CreatedAt:     time.Now().UnixNano(), State: runtimeapi.ContainerState_CONTAINER_CREATED,
		CgroupParent: sb.Config.GetLinux().GetCgroupParent(),
	}
	rec.MaxVCPUs, rec.MaxMemoryMiB = resize.Headroom(r.Opts, res)
	if cfg.GetLogPath() != "" {
		rec.LogPath = filepath.Join(sb.Config.GetLogDirectory(), cfg.GetLogPath())
	}
	return rec
}

// specOf is the domain's spec: the record's size, the pod's identity in
// its metadata, its console, boot and root disk.
func (r *Service) specOf(sb *store.Sandbox, rec *store.Container, in vmRequest, layout core.ImageLayout) vm.Spec {
	spec := vm.Spec{
		Name: rec.Domain, Meta: vm.Metadata{
			Instance: r.Opts.Instance, PodUID: sb.Config.GetMetadata().GetUid(), PodName: sb.Config.GetMetadata().GetName(),
			PodNamespace: sb.Config.GetMetadata().GetNamespace(), SandboxID: sb.ID, ContainerID: rec.ID,
		},
		VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, Accel: r.Accel, Emulator: r.Opts.Emulator,
		MaxVCPUs: rec.MaxVCPUs, MaxMemoryMiB: rec.MaxMemoryMiB,
		Console:      vm.Console{Socket: vmfiles.ConsoleSocket(rec.Dir), Log: filepath.Join(rec.Dir, vmfiles.ConsoleLogFile)},
		SharedMemory: len(in.storage.Shares) > 0, HugePageKiB: in.res.HugePages.PageKiB,
	}
	if layout.Kernel != "" {
		args := layout.KernelArgs
		if in.opts.KernelArgs != "" {
			args = in.opts.KernelArgs
		}
		spec.Boot = &vm.KernelBoot{Kernel: layout.Kernel, Initrd: layout.Initrd, Args: args}
	}
	if in.root != nil {
		spec.Disk = r.RootDisks.RootVolumeDisk(in.root, rec.Dir)
	} else if layout.DiskPath != "" {
		spec.Disk = &vm.Disk{Path: filepath.Join(vmfiles.PodDir(r.Opts.StateDir, sb.ID), vmfiles.DiskFile), Format: "qcow2",
			Backing: &vm.Disk{Path: layout.DiskPath, Format: layout.DiskFormat}}
	}
	return spec
}

// makeVMFiles makes the VM's directory and its root disk (the pod's, or
// a volume's: RootDisks), and gives the VM's own files to its identity:
// run/, the cloud-init ISO, the root disk, each readable by it alone.
// release ends a root volume's claim.
func (r *Service) makeVMFiles(ctx context.Context, sb *store.Sandbox, p *vmPlan, undo *opguard.Rollback) (release func(), err error) {
	release = func() {}
	if err := vmfiles.MakeVMDir(p.rec.Dir, sb.Identity); err != nil {
		return release, err
	}
	undo.Add("vm dir", func() error { return rootvol.RemoveVMDir(p.rec.Dir) })
	iso, err := r.CIData.WriteCIData(p.rec.Dir, p.cidata)
	if err != nil {
		return release, err
	}
	if err := vmidentity.GiveTo(sb.Identity, iso); err != nil {
		return release, err
	}
	if p.root != nil {
		release, p.rootImported, err = r.RootDisks.MakeRootVolume(ctx, sb, p.rec, p.root, p.layout, undo)
		return release, err
	}
	if p.spec.Disk == nil {
		return release, nil
	}
	if p.reuseDisk, err = r.RootDisks.MakePodDisk(sb, p.rec, p.spec.Disk.Path, p.layout, r.fromTemplate(p), undo); err != nil {
		return release, err
	}
	return release, vmidentity.GiveTo(sb.Identity, p.spec.Disk.Path)
}

// defineDomain defines (does not start) the VM's libvirt domain.
func (r *Service) defineDomain(p *vmPlan, undo *opguard.Rollback) error {
	var xml string
	var err error
	if p.rec.Clone != nil {
		xml, err = r.clones().CloneXML(p.rec, p.spec)
	} else {
		xml, err = vm.DomainXML(p.spec)
	}
	if err != nil {
		return err
	}
	l, err := r.Conn.Get()
	if err != nil {
		return err
	}
	dom, err := l.Define(xml)
	if err != nil {
		return fmt.Errorf("define domain %s: %w", p.rec.Domain, err)
	}
	undo.Add("domain", func() error { return l.Undefine(dom) })
	return nil
}

// identityOf gives the pod its own uid and gid (core.EnsureIdentity) and
// says so in its VM's spec; nil where identities are off.
func (r *Service) identityOf(sb *store.Sandbox) (*vm.Identity, error) {
	id, err := r.EnsureIdentity(sb)
	if err != nil || id == nil {
		return nil, err
	}
	return &vm.Identity{UID: id.UID, GID: id.GID}, nil
}

// checkDiskSize refuses an image whose disk declares more than the cap:
// the VM's overlay grows up to that size on the state dir's filesystem,
// which every VM and the store share.
func (r *Service) checkDiskSize(image string, l core.ImageLayout, root *vm.RootVolume) error {
	limit := r.Opts.MaxDiskVirtualSize
	if limit <= 0 {
		limit = core.DefaultMaxDiskVirtualSize
	}
	if l.DiskPath == "" || l.DiskVirtualSize <= limit || root != nil { // a root volume's own size bounds it
		return nil
	}
	return errdefs.Invalid("config.image.image", "image %q declares a %d-byte disk (%s), more than the cap of %d bytes (%s; libvirt.max_disk_virtual_size_gib)",
		image, l.DiskVirtualSize, core.HumanBytes(l.DiskVirtualSize), limit, core.HumanBytes(limit))
}
