package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

// outputFormats are the values of -o: a table (or a sentence) for people,
// or the response as JSON or YAML for programs.
var outputFormats = []string{"table", "json", "yaml"}

// checkOutput refuses an -o that is none of outputFormats.
func (c *cli) checkOutput() error {
	if !slices.Contains(outputFormats, c.output) {
		return usagef("-o %q: want %s", c.output, orList(outputFormats))
	}
	return nil
}

// machineReadable says -o asks for the response itself (JSON or YAML),
// not for text.
func (c *cli) machineReadable() bool { return c.output != "table" }

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// printProto writes a response with the .proto's field names, every
// field present, as JSON or YAML.
func (c *cli) printProto(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	return c.printEncoded(b)
}

// printJSON writes v as its JSON encoding says, as JSON or YAML.
func (c *cli) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return c.printEncoded(b)
}

// printEncoded writes a JSON document as it is for -o json, and for -o
// yaml as YAML with the same keys in the same order, so that the two
// name every field alike.
func (c *cli) printEncoded(doc []byte) error {
	if c.output == "yaml" {
		var err error
		if doc, err = jsonToYAML(doc); err != nil {
			return err
		}
		_, err = c.stdout.Write(doc)
		return err
	}
	_, err := fmt.Fprintf(c.stdout, "%s\n", doc)
	return err
}

// jsonToYAML re-encodes JSON, a subset of YAML, in YAML's block style.
// Scalars keep their tags: a string YAML would read as something else
// (a number in a string, as protojson writes 64-bit integers, "true",
// "null") stays quoted.
func jsonToYAML(doc []byte) ([]byte, error) {
	var n yaml.Node
	if err := yaml.Unmarshal(doc, &n); err != nil {
		return nil, err
	}
	blockStyle(&n)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// blockStyle drops the flow style and quotes JSON's syntax gave n and
// what it holds: the encoder then chooses block style and quotes only
// where YAML needs them.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
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
