package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

const migrateWhat = `Moves a running VM to another node, live (its memory, disk and processes),
between two crimux endpoints: VM on --endpoint (the source), TARGET on --to (the
target node's crimux), a VM pod made there with the annotation
crimux.io/migrate-from, waiting for it. Prints the progress; on success the
source's container exits with reason Migrated and the VM runs in TARGET, with
TARGET's pod address; on any failure it runs on the source, unchanged.
--timeout bounds the whole migration.`

// migrateCall is a migration's deadline, unless --timeout chose one.
const migrateCall = 30 * time.Minute

func (c *cli) vmMigrate(args []string) error {
	fs := newFlagSet(c, "vm migrate", "VM TARGET --to ENDPOINT", migrateWhat)
	to := fs.String("to", "", "the target node's crimux socket (unix:///...)")
	deadlineHelp(fs, short(migrateCall))
	pos, err := c.parse(fs, args, 2)
	if err != nil {
		return err
	}
	if *to == "" {
		return usagef("vm migrate: --to must name the target node's crimux")
	}
	src, err := vmRef(pos[0])
	if err != nil {
		return err
	}
	dst, err := vmRef(pos[1])
	if err != nil {
		return err
	}
	sconn, ctx, done, err := c.dial(migrateCall)
	if err != nil {
		return err
	}
	defer done()
	tconn, err := grpc.NewClient(*to, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer tconn.Close()
	m := migrationRun{c: c, source: vmv1.NewVMServiceClient(sconn), target: vmv1.NewVMServiceClient(tconn), src: src, dst: dst}
	return m.run(ctx)
}

// migrationRun is one migration's four calls.
type migrationRun struct {
	c              *cli
	source, target vmv1.VMServiceClient
	src, dst       *vmv1.VMRef
}

func (m migrationRun) run(ctx context.Context) error {
	sresp, err := m.source.GetMigrationSource(ctx, &vmv1.GetMigrationSourceRequest{Vm: m.src})
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	presp, err := m.target.PrepareMigration(ctx, &vmv1.PrepareMigrationRequest{Vm: m.dst, Source: sresp.GetSource()})
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if !m.c.machineReadable() { // stdout is the one JSON or YAML document there
		fmt.Fprintf(m.c.stdout, "migrating to %s (libvirt %s)\n", presp.GetTarget().GetAddress(), presp.GetTarget().GetLibvirtUri())
	}
	if err := m.follow(ctx, presp.GetTarget()); err != nil {
		// The VM runs on the source: the target stops waiting for it.
		fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		why := "the source failed to send it: " + status.Convert(err).Message()
		if _, ferr := m.target.FinishMigration(fctx, &vmv1.FinishMigrationRequest{Vm: m.dst, Failed: why}); ferr != nil {
			fmt.Fprintf(m.c.stderr, "crimuxctl: the target's end of the failed migration: %v\n", ferr)
		}
		return err
	}
	fresp, err := m.target.FinishMigration(ctx, &vmv1.FinishMigrationRequest{Vm: m.dst})
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if m.c.machineReadable() {
		return m.c.printProto(fresp)
	}
	fmt.Fprintf(m.c.stdout, "migrated: downtime %d ms, addresses %s\n", fresp.GetDowntimeMs(), strings.Join(fresp.GetAddresses(), ", "))
	if fresp.GetNote() != "" {
		fmt.Fprintf(m.c.stdout, "note: %s\n", fresp.GetNote())
	}
	return nil
}

// follow runs the source's Migrate and prints its progress.
func (m migrationRun) follow(ctx context.Context, t *vmv1.MigrationTarget) error {
	stream, err := m.source.Migrate(ctx, &vmv1.MigrateRequest{Vm: m.src, Target: t})
	if err != nil {
		return err
	}
	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !m.c.machineReadable() {
			fmt.Fprintln(m.c.stdout, progressLine(p))
		}
	}
}

// progressLine is one progress report, as a person reads it.
func progressLine(p *vmv1.MigrateProgress) string {
	const mib = 1 << 20
	return fmt.Sprintf("%6.1fs  %d/%d MiB sent, %d MiB remaining, dirtied %.1f MiB/s, pass %d",
		float64(p.GetElapsedMs())/1000, p.GetDataProcessedBytes()/mib, p.GetDataTotalBytes()/mib,
		p.GetDataRemainingBytes()/mib, float64(p.GetDirtyRateBytes())/mib, p.GetIteration())
}
