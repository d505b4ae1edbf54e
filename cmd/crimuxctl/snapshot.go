package main

import (
	"context"
	"fmt"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

const snapshotUsage = `Usage: crimuxctl vm snapshot COMMAND [flags] VM [NAME]

Commands:
  create VM NAME [--description TEXT]   snapshot the VM's disk, with its memory when it runs or is paused
  list VM                               the VM's snapshots, oldest first
  restore VM NAME                       return the VM to a snapshot (disk, and memory: it resumes where it was)
  delete VM NAME                        delete a snapshot (all of them go with the VM)

NAME: 1 to 64 characters of letters, digits, '.', '_' and '-', starting
with a letter or digit; unique per VM.

Run "crimuxctl vm snapshot COMMAND --help" for the flags of a command.
`

func (c *cli) snapshotCreate(args []string) error {
	fs := newFlagSet(c, "vm snapshot create", "VM NAME",
		"Snapshots the VM's disk (qcow2 internal snapshot), with its memory when it runs or is paused.")
	deadlineHelp(fs, short(snapshotCall))
	desc := fs.String("description", "", "a description kept with the snapshot")
	return c.vmCall(fs, args, 2, fixed(snapshotCall), func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error {
		resp, err := vms.CreateSnapshot(ctx, &vmv1.CreateSnapshotRequest{Vm: ref, SnapshotName: pos[1], Description: *desc})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		fmt.Fprintf(c.stdout, "%s: snapshot %s created (%s)\n", pos[0], pos[1], snapshotKind(resp.GetSnapshot()))
		return nil
	})
}

func (c *cli) snapshotList(args []string) error {
	fs := newFlagSet(c, "vm snapshot list", "VM", "Lists the VM's snapshots, oldest first.")
	return c.vmCall(fs, args, 1, fixed(0), func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, _ []string) error {
		resp, err := vms.ListSnapshots(ctx, &vmv1.ListSnapshotsRequest{Vm: ref})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		return c.snapshotTable(resp.GetSnapshots(), "")
	})
}

func (c *cli) snapshotRestore(args []string) error {
	fs := newFlagSet(c, "vm snapshot restore", "VM NAME",
		"Returns the VM to a snapshot: its disk and, for a snapshot of a running or paused VM, its\n"+
			"memory (the guest resumes where it was). The VM ends in the state the snapshot was taken in.")
	deadlineHelp(fs, short(snapshotCall))
	return c.vmCall(fs, args, 2, fixed(snapshotCall), func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error {
		resp, err := vms.RestoreSnapshot(ctx, &vmv1.RestoreSnapshotRequest{Vm: ref, SnapshotName: pos[1]})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		fmt.Fprintf(c.stdout, "%s: snapshot %s restored; power state %s\n", pos[0], pos[1], powerName(resp.GetState()))
		return nil
	})
}

func (c *cli) snapshotDelete(args []string) error {
	fs := newFlagSet(c, "vm snapshot delete", "VM NAME", "Deletes one snapshot of the VM.")
	deadlineHelp(fs, short(snapshotCall))
	return c.vmCall(fs, args, 2, fixed(snapshotCall), func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error {
		resp, err := vms.DeleteSnapshot(ctx, &vmv1.DeleteSnapshotRequest{Vm: ref, SnapshotName: pos[1]})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		fmt.Fprintf(c.stdout, "%s: snapshot %s deleted\n", pos[0], pos[1])
		return nil
	})
}

func snapshotKind(s *vmv1.Snapshot) string {
	if s.GetHasMemory() {
		return s.GetVmState() + ", with memory"
	}
	return s.GetVmState() + ", disk only"
}
