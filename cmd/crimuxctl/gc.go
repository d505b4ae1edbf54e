package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

const gcWhat = `Lists the resources of another crimux identity on this node (a wiped or moved state dir,
another crimux on the same libvirtd), which crimux reports and never touches on its own:
libvirt domains named crimux-* whose crimux metadata names another instance or is missing,
and VM pod network namespaces of another instance. On your command, one at a time:

  --adopt KIND/NAME    make it this crimux's: a running domain joins this crimux's VM pods,
                       with its pod's namespace (kubelet then removes a pod it does not
                       know); a stopped domain is removed; a namespace no pod owns gets
                       CNI DEL and is removed. Refused: a domain without crimux metadata,
                       the namespace of another identity's domain (adopt the domain).
  --delete KIND/NAME   remove it: a domain is destroyed and undefined (with its snapshots
                       and managed save); a namespace gets CNI DEL and is removed.

KIND/NAME as listed: domain/crimux-<id> or netns/<instance>_<sandbox ID>.`

// gcCall is the deadline of an adoption or deletion, unless --timeout
// chose one: an adoption runs collector passes, whose
// CNI calls may take minutes.
const gcCall = 5 * time.Minute

func (c *cli) gc(args []string) error {
	fs := newFlagSet(c, "gc", "[--adopt KIND/NAME | --delete KIND/NAME]", gcWhat)
	adopt := fs.String("adopt", "", "make the resource KIND/NAME this crimux's")
	del := fs.String("delete", "", "remove the resource KIND/NAME")
	deadlineHelp(fs, short(defaultTimeout)+"; --adopt and --delete "+short(gcCall))
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	req, err := collectRequest(*adopt, *del)
	if err != nil {
		return err
	}
	deadline := time.Duration(0)
	if req != nil {
		deadline = gcCall
	}
	conn, ctx, done, err := c.dial(deadline)
	if err != nil {
		return err
	}
	defer done()
	vms := vmv1.NewVMServiceClient(conn)
	if req == nil {
		return c.gcList(ctx, vms)
	}
	return c.gcCollect(ctx, vms, req)
}

// collectRequest makes the request --adopt or --delete asks for; nil
// when neither is given (list).
func collectRequest(adopt, del string) (*vmv1.CollectForeignRequest, error) {
	req := &vmv1.CollectForeignRequest{}
	switch {
	case adopt != "" && del != "":
		return nil, usagef("gc: give one of --adopt and --delete")
	case adopt != "":
		req.Action = vmv1.ForeignAction_FOREIGN_ACTION_ADOPT
		req.Kind, req.Name = splitForeign(adopt)
	case del != "":
		req.Action = vmv1.ForeignAction_FOREIGN_ACTION_DELETE
		req.Kind, req.Name = splitForeign(del)
	default:
		return nil, nil
	}
	if (req.Kind != "domain" && req.Kind != "netns") || req.Name == "" || strings.Contains(req.Name, "/") {
		return nil, usagef("gc: %q: want KIND/NAME, KIND domain or netns (e.g. domain/crimux-<id>, netns/<instance>_<sandbox ID>)", adopt+del)
	}
	return req, nil
}

func splitForeign(arg string) (kind, name string) {
	kind, name, _ = strings.Cut(arg, "/")
	return kind, name
}

func (c *cli) gcList(ctx context.Context, vms vmv1.VMServiceClient) error {
	resp, err := vms.ListForeign(ctx, &vmv1.ListForeignRequest{})
	if err != nil {
		return err
	}
	if c.machineReadable() {
		return c.printProto(resp)
	}
	if len(resp.GetResources()) == 0 {
		fmt.Fprintln(c.stdout, "No resources of another crimux identity.")
		return nil
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND/NAME\tINSTANCE\tSTATE\tDETAIL")
	for _, r := range resp.GetResources() {
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\n", r.GetKind(), r.GetName(), dash(r.GetInstance()), dash(r.GetState()), r.GetDetail())
	}
	return w.Flush()
}

func (c *cli) gcCollect(ctx context.Context, vms vmv1.VMServiceClient, req *vmv1.CollectForeignRequest) error {
	resp, err := vms.CollectForeign(ctx, req)
	if err != nil {
		return err
	}
	if c.machineReadable() {
		return c.printProto(resp)
	}
	done := "deleted"
	if req.GetAction() == vmv1.ForeignAction_FOREIGN_ACTION_ADOPT {
		done = "adopted"
	}
	fmt.Fprintf(c.stdout, "%s/%s: %s\n", req.GetKind(), req.GetName(), done)
	return nil
}
