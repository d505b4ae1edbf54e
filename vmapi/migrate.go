package vmapi

import (
	"context"
	"fmt"

	"github.com/crimux/crimux/internal/errdefs"
	vmv1 "github.com/crimux/crimux/proto/vm/v1"
	"github.com/crimux/crimux/registry"
	"github.com/crimux/crimux/vmtypes"
)

// migrator resolves ref to its VM runtime's migrations and the runtime's
// own ID of it.
func (s *Server) migrator(ctx context.Context, ref *vmv1.VMRef) (vmtypes.Migrator, target, error) {
	reg := s.routed(ctx)
	t, err := resolve(ctx, reg, ref)
	if err != nil {
		return nil, t, err
	}
	for _, rt := range reg.Backends() {
		if rt.Name != t.name {
			continue
		}
		if m, ok := registry.Ability[vmtypes.Migrator](rt); ok {
			return m, t, nil
		}
	}
	return nil, t, t.wrap(fmt.Errorf("runtime %s cannot migrate VMs: %w", t.name, errdefs.ErrFailedPrecondition))
}

// GetMigrationSource describes a running VM for its target.
func (s *Server) GetMigrationSource(ctx context.Context, req *vmv1.GetMigrationSourceRequest) (*vmv1.GetMigrationSourceResponse, error) {
	m, t, err := s.migrator(ctx, req.GetVm())
	if err != nil {
		return nil, err
	}
	src, err := m.MigrationSource(ctx, t.id)
	if err != nil {
		return nil, t.wrap(err)
	}
	return &vmv1.GetMigrationSourceResponse{Source: sourceToProto(src)}, nil
}

// PrepareMigration readies a target VM pod.
func (s *Server) PrepareMigration(ctx context.Context, req *vmv1.PrepareMigrationRequest) (*vmv1.PrepareMigrationResponse, error) {
	if req.GetSource().GetDomainXml() == "" {
		return nil, errdefs.Invalid("source.domain_xml", "must be the source's migratable domain (GetMigrationSource)")
	}
	m, t, err := s.migrator(ctx, req.GetVm())
	if err != nil {
		return nil, err
	}
	tg, err := m.PrepareMigration(ctx, t.id, sourceFromProto(req.GetSource()))
	if err != nil {
		return nil, t.wrap(err)
	}
	return &vmv1.PrepareMigrationResponse{Target: targetToProto(tg)}, nil
}

// Migrate moves a VM to its prepared target, streaming the progress.
func (s *Server) Migrate(req *vmv1.MigrateRequest, stream vmv1.VMService_MigrateServer) error {
	return s.MigrateFollowing(stream.Context(), req, func(p *vmv1.MigrateProgress) { _ = stream.Send(p) })
}

// MigrateFollowing is Migrate for a caller in crimux's own process (the
// node agent): each progress goes to progress, on the call's goroutine,
// and no stream stands between them.
func (s *Server) MigrateFollowing(ctx context.Context, req *vmv1.MigrateRequest, progress func(*vmv1.MigrateProgress)) error {
	m, t, err := s.migrator(ctx, req.GetVm())
	if err != nil {
		return err
	}
	err = m.Migrate(ctx, t.id, targetFromProto(req.GetTarget()), func(p vmtypes.MigrationProgress) {
		progress(&vmv1.MigrateProgress{ElapsedMs: p.Elapsed.Milliseconds(), DataTotalBytes: p.DataTotal,
			DataProcessedBytes: p.DataProcessed, DataRemainingBytes: p.DataRemaining, DirtyRateBytes: p.DirtyRate, Iteration: p.Iteration})
	})
	if err != nil {
		return t.wrap(err)
	}
	return nil
}

// FinishMigration ends a target's wait.
func (s *Server) FinishMigration(ctx context.Context, req *vmv1.FinishMigrationRequest) (*vmv1.FinishMigrationResponse, error) {
	m, t, err := s.migrator(ctx, req.GetVm())
	if err != nil {
		return nil, err
	}
	res, err := m.FinishMigration(ctx, t.id, req.GetFailed())
	if err != nil {
		return nil, t.wrap(err)
	}
	return &vmv1.FinishMigrationResponse{DowntimeMs: res.Downtime.Milliseconds(), Addresses: res.Addresses, Note: res.Note}, nil
}
