package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// printProto writes a response as JSON with the .proto's field names,
// every field present.
func (c *cli) printProto(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

func (c *cli) vmTable(vms []*vmv1.VM) error {
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tCONTAINER ID\tCONTAINER STATE\tPOWER\tDOMAIN STATE\tVCPUS\tMEMORY\tSNAPSHOTS")
	for _, v := range vms {
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\n", v.GetNamespace(), v.GetName(), dash(v.GetContainerId()),
			dash(strings.TrimPrefix(v.GetContainerState(), "CONTAINER_")), powerName(v.GetPowerState()), v.GetDomainState(),
			v.GetResources().GetVcpus(), mib(v.GetResources().GetMemoryMib()), len(v.GetSnapshots()))
	}
	return w.Flush()
}

func (c *cli) vmDetails(v *vmv1.VM) error {
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	managed := "no"
	if v.GetHasManagedSave() {
		managed = "yes (hibernated memory on disk)"
	}
	for _, row := range [][2]string{
		{"Pod", v.GetNamespace() + "/" + v.GetName()},
		{"Pod sandbox ID", v.GetPodSandboxId()},
		{"Pod state", v.GetPodState()},
		{"Container ID", dash(v.GetContainerId())},
		{"Container state", dash(v.GetContainerState())},
		{"Power state", powerName(v.GetPowerState())},
		{"Domain", dash(v.GetDomain()) + " (" + v.GetDomainState() + ")"},
		{"Managed save", managed},
		{"Accelerator", dash(v.GetAccelerator())},
		{"Resources", fmt.Sprintf("%d vCPUs, %s", v.GetResources().GetVcpus(), mib(v.GetResources().GetMemoryMib()))},
		{"Image", dash(v.GetImage())},
	} {
		fmt.Fprintf(w, "%s:\t%s\n", row[0], row[1])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, "Snapshots:")
	if len(v.GetSnapshots()) == 0 {
		fmt.Fprintln(c.stdout, "  (none)")
		return nil
	}
	return c.snapshotTable(v.GetSnapshots(), "  ")
}

func (c *cli) snapshotTable(snaps []*vmv1.Snapshot, indent string) error {
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, indent+"NAME\tCREATED\tVM STATE\tMEMORY\tCURRENT\tDESCRIPTION")
	for _, s := range snaps {
		created := time.Unix(s.GetCreatedAt(), 0).UTC().Format(time.RFC3339)
		fmt.Fprintf(w, "%s%s\t%s\t%s\t%v\t%v\t%s\n", indent, s.GetName(), created, s.GetVmState(), s.GetHasMemory(), s.GetCurrent(), s.GetDescription())
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func mib(n uint64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%d MiB", n)
}
