package libvirt

import (
	"context"
	"log/slog"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/errdefs"
	"github.com/crimux/crimux/internal/idcodec"
	"github.com/crimux/crimux/internal/inproc"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/runtimes/libvirt/gc"
	"github.com/crimux/crimux/runtimes/libvirt/vmimage"
	"github.com/crimux/crimux/runtimes/libvirt/vmops"
	"github.com/crimux/crimux/vmtypes"
)

// Factory makes the VM runtime for the registry. All vm entries share one
// runtime: there is one libvirtd and one state dir.
type Factory struct {
	Options Options
	// ContainerdEndpoint is the containerd whose image store holds VM images.
	ContainerdEndpoint string
	// Images and Cgroups replace the host's (tests); nil uses the host's.
	Images  ImageReader
	Cgroups Cgroups
	Log     *slog.Logger
}

// Key: one VM runtime per crimux.
func (f Factory) Key(config.Runtime) string { return "libvirt" }

// New starts the runtime and serves it as a gRPC service in this process,
// so the CRI server calls it exactly as it calls containerd (IDs rewritten
// by codec, errors as gRPC statuses): unary calls directly
// (internal/inproc), streams over an in-memory connection.
func (f Factory) New(ctx context.Context, rc config.Runtime, codec *idcodec.Codec) (registry.Backend, error) {
	images, cgroups, closeImages, err := f.hostParts()
	if err != nil {
		return nil, err
	}
	rtOpts, closePeers, err := f.withPeers()
	if err != nil {
		closeImages()
		return nil, err
	}
	rt, err := New(ctx, rtOpts, images, cgroups, f.Log)
	if err != nil {
		closeImages()
		closePeers()
		return nil, err
	}
	rt.closers = append(rt.closers, closeImages, closePeers)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(serverInterceptor),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return errdefs.ToGRPC(h(srv, ss))
		}),
	)
	runtimeapi.RegisterRuntimeServiceServer(srv, rt.cri)
	go func() { _ = srv.Serve(lis) }()
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
	}
	var (
		codecUnary grpc.UnaryClientInterceptor
		ids        idcodec.Codec
	)
	if codec != nil {
		ids = *codec
		codecUnary = codec.UnaryClientInterceptor()
		opts = append(opts, grpc.WithChainStreamInterceptor(codec.StreamClientInterceptor()))
	}
	conn, err := grpc.NewClient("passthrough:///crimux-vm", opts...)
	if err != nil {
		srv.Stop()
		rt.Close()
		return nil, err
	}
	// Unary calls are function calls (internal/inproc), through the
	// same interceptors; only streams use the in-memory connection.
	direct := inproc.New(&runtimeapi.RuntimeService_ServiceDesc, rt.cri, serverInterceptor, codecUnary, conn)
	return &backend{Operator: operator{rt.ops, rt.gc}, rt: rt, srv: srv, conn: conn, ids: ids, client: runtimeapi.NewRuntimeServiceClient(direct)}, nil
}

// serverInterceptor is what the VM runtime's server does around each
// unary call, over the in-memory connection or called directly.
func serverInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	// An image cache entry a call prepared stays held until the call
	// returns, with its record written, even if its client gave up
	// before (vmimage.WithHoldScope).
	ctx, endHolds := vmimage.WithHoldScope(ctx)
	defer endHolds()
	resp, err := h(ctx, req)
	return resp, errdefs.ToGRPC(err)
}

// withPeers lists containerd's pods for CNI GC (peers.go) when VM pods
// have a network and the caller named no other lister.
func (f Factory) withPeers() (Options, func() error, error) {
	opts := f.Options
	if opts.Network == nil || opts.PeerSandboxes != nil || f.ContainerdEndpoint == "" {
		return opts, func() error { return nil }, nil
	}
	list, closePeers, err := containerdSandboxes(f.ContainerdEndpoint)
	if err != nil {
		return opts, nil, err
	}
	opts.PeerSandboxes = list
	return opts, closePeers, nil
}

func (f Factory) hostParts() (ImageReader, Cgroups, func() error, error) {
	images, cgroups, closeImages := f.Images, f.Cgroups, func() error { return nil }
	var err error
	if images == nil {
		images, closeImages, err = ContainerdImages(f.ContainerdEndpoint, imageCacheDir(f.Options.StateDir))
		if err != nil {
			return nil, nil, nil, err
		}
	}
	if cgroups == nil {
		if cgroups, err = HostCgroups(); err != nil {
			closeImages()
			return nil, nil, nil, err
		}
	}
	return images, cgroups, closeImages, nil
}

var _ registry.EncodedLister = (*backend)(nil)

// The VM runtime's backend has the image abilities (image_files.go): a
// method that drifted from them would silently never be called.
var (
	_ registry.ImageCollector     = (*backend)(nil)
	_ registry.ImageFsContributor = (*backend)(nil)
	_ registry.ImagePreparer      = (*backend)(nil)
)

// backend is the VM runtime as the registry holds it: CRI through an
// in-memory connection, and the abilities beyond CRI the daemon, the CRI
// server and the VM API ask for (registry.Ability): VM operations
// (vmtypes.Operator), Recovered, PowerStateCounts, VMSamples, CollectImages and
// ImageFsUsage (image_files.go), and lists kept encoded (EncodedSandboxes,
// EncodedContainers).
type backend struct {
	vmtypes.Operator
	rt     *Runtime
	srv    *grpc.Server
	conn   *grpc.ClientConn
	ids    idcodec.Codec // the IDs clients see
	client runtimeapi.RuntimeServiceClient
}

func (b *backend) Runtime() runtimeapi.RuntimeServiceClient { return b.client }

// Images is nil: VM images live in the primary's (containerd's) store.
func (b *backend) Images() runtimeapi.ImageServiceClient { return nil }

func (b *backend) Close() error {
	b.conn.Close()
	b.srv.Stop()
	return b.rt.Close()
}

// EncodedSandboxes lists the VM pods encoded (registry.EncodedLister).
func (b *backend) EncodedSandboxes(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]byte, error) {
	out, err := b.rt.cri.EncodedSandboxes(ctx, f, b.ids)
	return out, errdefs.ToGRPC(err)
}

// EncodedContainers lists the VMs encoded (registry.EncodedLister).
func (b *backend) EncodedContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]byte, error) {
	out, err := b.rt.cri.EncodedContainers(ctx, f, b.ids)
	return out, errdefs.ToGRPC(err)
}

// Recovered is closed once the runtime has caught up after a start (see
// Runtime.Recovered).
func (b *backend) Recovered() <-chan struct{} { return b.rt.Recovered() }

// PowerStateCounts counts the VMs by power state (metrics).
func (b *backend) PowerStateCounts() (map[string]int, error) { return b.rt.PowerStateCounts() }

// VMSamples are each VM's figures for metrics (vmtypes.Sampler).
func (b *backend) VMSamples() ([]vmtypes.VMSample, error) { return b.rt.stats.VMSamples() }

// CollectImages drops the image cache entries no VM needs any more
// (registry.ImageCollector).
func (b *backend) CollectImages(ctx context.Context) error { return b.rt.CollectImages(ctx) }

// PrepareImage makes a VM image's files after its pull (image_files.go).
func (b *backend) PrepareImage(ctx context.Context, ref string) error {
	return b.rt.PrepareImage(ctx, ref)
}

// ImageFsUsage is what the VM runtime's files of images take
// (registry.ImageFsContributor).
func (b *backend) ImageFsUsage(ctx context.Context) (*runtimeapi.FilesystemUsage, error) {
	return b.rt.ImageFsUsage(ctx)
}

// operator is the VM runtime's vmtypes.Operator: the VM operations, and
// the foreign resources of the collector.
type operator struct {
	*vmops.Ops
	gc *gc.Collector
}

func (o operator) ListForeign(ctx context.Context) ([]vmtypes.ForeignResource, error) {
	return o.gc.ListForeign(ctx)
}

func (o operator) AdoptForeign(ctx context.Context, kind, name string) error {
	return o.gc.AdoptForeign(ctx, kind, name)
}

func (o operator) DeleteForeign(ctx context.Context, kind, name string) error {
	return o.gc.DeleteForeign(ctx, kind, name)
}

// ListTemplates, WarmTemplate and RemoveTemplate are the VM runtime's
// templates (vmtypes.Templates).
func (b *backend) ListTemplates(ctx context.Context) ([]vmtypes.TemplateInfo, error) {
	return b.rt.instant.ListTemplates(ctx)
}

func (b *backend) WarmTemplate(ctx context.Context, w vmtypes.TemplateWarm) (vmtypes.TemplateInfo, error) {
	return b.rt.instant.WarmTemplate(ctx, w)
}

func (b *backend) RemoveTemplate(ctx context.Context, key string) error {
	return b.rt.instant.RemoveTemplate(ctx, key)
}

// MigrationSource, PrepareMigration, Migrate and FinishMigration are the
// VM runtime's live migrations (vmtypes.Migrator).
func (b *backend) MigrationSource(ctx context.Context, id string) (vmtypes.MigrationSource, error) {
	return b.rt.migrate.MigrationSource(ctx, id)
}

func (b *backend) PrepareMigration(ctx context.Context, id string, src vmtypes.MigrationSource) (vmtypes.MigrationTarget, error) {
	return b.rt.migrate.PrepareMigration(ctx, id, src)
}

func (b *backend) Migrate(ctx context.Context, id string, t vmtypes.MigrationTarget, progress func(vmtypes.MigrationProgress)) error {
	return b.rt.migrate.Migrate(ctx, id, t, progress)
}

func (b *backend) FinishMigration(ctx context.Context, id, failed string) (vmtypes.MigrationResult, error) {
	return b.rt.migrate.FinishMigration(ctx, id, failed)
}

var _ vmtypes.Migrator = (*backend)(nil)
