package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

const templateUsage = `Usage: crimuxctl template COMMAND [flags] [ARGS]

A template is a VM image booted once in a shape (vCPUs, memory) and saved:
VM pods that ask for it (RuntimeClass vm-instant, or the annotation
crimux.io/start: template) are restored from it in seconds, each made a
machine of its own. A template serves the pods of one namespace, unless
the node shares templates across namespaces
(libvirt.template_share_across_namespaces). The first such pod of an
image, shape and namespace makes it.

Commands:
  list                                                  the templates, with their namespace, state and size
  warm IMAGE --cpus N --memory SIZE [--namespace NS]    make the template of a pulled image ahead of its pods
                                                        of namespace NS (default "default")
  rm KEY                                                remove a template (its clones run on; a failed one
                                                        is made again by the next pod that asks for it)

SIZE: MiB, or a number with Mi, Gi, M or G (as in a pod's memory limit).
`

// defaultNamespace is the namespace a warm's template serves unless
// --namespace names another: kubectl's.
const defaultNamespace = "default"

// templateWarmCall bounds a warm, unless --timeout chose otherwise: a
// Debian guest boots in ~40 s under TCG, settles and is saved.
const templateWarmCall = 12 * time.Minute

func (c *cli) templateList(args []string) error {
	fs := newFlagSet(c, "template list", "", "Lists the VM templates.")
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	conn, ctx, done, err := c.dial(0)
	if err != nil {
		return err
	}
	defer done()
	resp, err := vmv1.NewVMServiceClient(conn).ListTemplates(ctx, &vmv1.ListTemplatesRequest{})
	if err != nil {
		return err
	}
	if c.machineReadable() {
		return c.printProto(resp)
	}
	if len(resp.GetTemplates()) == 0 {
		fmt.Fprintln(c.stdout, "No templates.")
		return nil
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tNAMESPACE\tIMAGE\tSHAPE\tSTATE\tSIZE\tERROR")
	for _, t := range resp.GetTemplates() {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.GetKey(), templateNamespace(t), t.GetImage(), templateShape(t), t.GetState(),
			sizeMiB(t.GetSizeBytes()), dash(t.GetError()))
	}
	return w.Flush()
}

// sharedNamespaces is the namespace column of a template that serves
// every namespace (made with templates shared across namespaces).
const sharedNamespaces = "(all)"

func templateNamespace(t *vmv1.Template) string {
	if t.GetNamespace() == "" {
		return sharedNamespaces
	}
	return t.GetNamespace()
}

func templateShape(t *vmv1.Template) string {
	return fmt.Sprintf("%d vCPU %d MiB %s", t.GetVcpus(), t.GetMemoryMib(), t.GetAccel())
}

func sizeMiB(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func (c *cli) templateWarm(args []string) error {
	fs := newFlagSet(c, "template warm", "IMAGE --cpus N --memory SIZE [--namespace NS]",
		"Makes the template of a pulled image in the shape of a VM pod with those CPUs and memory, for the pods of\n"+
			"namespace NS, and waits for it. On a node that shares templates across namespaces, the namespace is ignored.")
	cpus := fs.Uint("cpus", 1, "the pod's vCPUs")
	memory := fs.String("memory", "", "the pod's memory (e.g. 1Gi, 512Mi, 1024)")
	namespace := fs.String("namespace", defaultNamespace, "the namespace of the pods the template serves")
	deadlineHelp(fs, short(templateWarmCall))
	pos, err := c.parse(fs, args, 1)
	if err != nil {
		return err
	}
	mem, err := parseMiB(*memory)
	if err != nil {
		return usagef("template warm: --memory %q: %v", *memory, err)
	}
	if *namespace == "" {
		return usagef("template warm: --namespace: must name a namespace")
	}
	conn, ctx, done, err := c.dial(templateWarmCall)
	if err != nil {
		return err
	}
	defer done()
	stop := c.progress(fmt.Sprintf("making the template of %s (%d vCPUs, %d MiB) for namespace %s", pos[0], *cpus, mem, *namespace))
	resp, err := vmv1.NewVMServiceClient(conn).WarmTemplate(ctx, &vmv1.WarmTemplateRequest{Image: pos[0], Vcpus: uint32(*cpus), MemoryMib: mem,
		Namespace: *namespace})
	stop()
	if err != nil {
		return err
	}
	if c.machineReadable() {
		return c.printProto(resp)
	}
	t := resp.GetTemplate()
	fmt.Fprintf(c.stdout, "template %s of %s (%s, namespace %s): %s\n", t.GetKey(), t.GetImage(), templateShape(t),
		templateNamespace(t), t.GetState())
	return nil
}

func (c *cli) templateRemove(args []string) error {
	fs := newFlagSet(c, "template rm", "KEY", "Removes a VM template; the VMs restored from it run on.")
	pos, err := c.parse(fs, args, 1)
	if err != nil {
		return err
	}
	conn, ctx, done, err := c.dial(0)
	if err != nil {
		return err
	}
	defer done()
	resp, err := vmv1.NewVMServiceClient(conn).RemoveTemplate(ctx, &vmv1.RemoveTemplateRequest{Key: pos[0]})
	if err != nil {
		return err
	}
	if c.machineReadable() {
		return c.printProto(resp)
	}
	fmt.Fprintf(c.stdout, "template %s removed\n", pos[0])
	return nil
}

// parseMiB reads a memory size: MiB, or with a suffix Mi, Gi, M or G.
func parseMiB(s string) (uint64, error) {
	units := []struct {
		suffix string
		bytes  float64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"G", 1e9}, {"M", 1e6}, {"", 1 << 20}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(num, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("not a positive size")
		}
		return uint64((n*u.bytes + (1<<20 - 1)) / (1 << 20)), nil // rounded up, as kubelet's limit is
	}
	return 0, fmt.Errorf("not a size")
}

// progressEvery is how often a call that waits long says it still waits.
var progressEvery = 15 * time.Second

// progress says on stderr what a long call waits for, then every
// progressEvery how long it has waited, until stop is called; nothing
// with -o json or yaml (stderr stays for errors there too).
func (c *cli) progress(what string) (stop func()) {
	if c.machineReadable() {
		return func() {}
	}
	fmt.Fprintf(c.stderr, "%s ...\n", what)
	start := time.Now()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(c.stderr, "  still waiting: %s\n", time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-ended }
}
