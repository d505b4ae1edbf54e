package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

const vmUsage = `Usage: crimuxctl vm COMMAND [flags] ARGS

Commands:
  list                                    the VMs of this node
  get VM                                  one VM: power state, domain state, resources, snapshots
  reboot VM [--hard] [--timeout 30s]      reboot: the guest restarts itself on the ACPI power
                                          button, or is reset after --timeout; --hard resets at once
  power VM STATE [--timeout 30s]          set the power state: running, paused, shutdown, hibernate
  snapshot create VM NAME [--description TEXT]
  snapshot list VM
  snapshot restore VM NAME
  snapshot delete VM NAME
  migrate VM TARGET --to ENDPOINT         move a running VM, live, to TARGET (a VM pod made with
                                          crimux.io/migrate-from) on the node whose crimux is ENDPOINT

VM is a pod sandbox ID or container ID as crictl shows them (vm--...), or
namespace/name. Whatever the power state, the VM stays the same running
CRI container for kubelet.

Run "crimuxctl vm COMMAND --help" for the flags of a command.
`

// The call deadlines of commands that wait on a guest or write its
// memory, unless --timeout before the command chose one.
const (
	slowCall     = 2 * time.Minute
	snapshotCall = 5 * time.Minute
)

// vmRef parses a VM argument: namespace/name, else an ID.
func vmRef(arg string) (*vmv1.VMRef, error) {
	ns, name, isPod := strings.Cut(arg, "/")
	if !isPod {
		return &vmv1.VMRef{Ref: &vmv1.VMRef_Id{Id: arg}}, nil
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, usagef("VM %q: want an ID or namespace/name", arg)
	}
	return &vmv1.VMRef{Ref: &vmv1.VMRef_Pod{Pod: &vmv1.PodName{Namespace: ns, Name: name}}}, nil
}

// vmCall parses a command's arguments (the first one the VM), connects
// with the deadline the parsed flags call for, and runs call with a VM API
// client.
func (c *cli) vmCall(fs *flag.FlagSet, args []string, want int, deadline func() time.Duration,
	call func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error) error {
	pos, err := c.parse(fs, args, want)
	if err != nil {
		return err
	}
	var ref *vmv1.VMRef
	if want > 0 {
		if ref, err = vmRef(pos[0]); err != nil {
			return err
		}
	}
	conn, ctx, done, err := c.dial(deadline())
	if err != nil {
		return err
	}
	defer done()
	return call(ctx, vmv1.NewVMServiceClient(conn), ref, pos)
}

func (c *cli) vmList(args []string) error {
	fs := newFlagSet(c, "vm list", "", "Lists the VMs of this node: pod, container, power state, libvirt domain state, size, snapshots.")
	return c.vmCall(fs, args, 0, fixed(0), func(ctx context.Context, vms vmv1.VMServiceClient, _ *vmv1.VMRef, _ []string) error {
		resp, err := vms.ListVMs(ctx, &vmv1.ListVMsRequest{})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		return c.vmTable(resp.GetVms())
	})
}

func (c *cli) vmGet(args []string) error {
	fs := newFlagSet(c, "vm get", "VM", "Shows one VM: its pod and container, power state, libvirt domain state, accelerator, resources and snapshots.")
	return c.vmCall(fs, args, 1, fixed(0), func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, _ []string) error {
		resp, err := vms.GetVM(ctx, &vmv1.GetVMRequest{Vm: ref})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		return c.vmDetails(resp.GetVm())
	})
}

func (c *cli) vmReboot(args []string) error {
	fs := newFlagSet(c, "vm reboot", "VM", "Reboots a running VM: the ACPI power button first (the guest restarts itself), a reset\nif it has not within --timeout. The CRI container stays the same and running.")
	hard := fs.Bool("hard", false, "reset the VM at once, without asking the guest")
	timeout := fs.Duration("timeout", 30*time.Second, "how long the guest has to restart itself before the VM is reset")
	return c.vmCall(fs, args, 1, func() time.Duration { return max(slowCall, *timeout+time.Minute) }, func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error {
		secs, err := seconds("--timeout", *timeout)
		if err != nil {
			return err
		}
		resp, err := vms.RebootVM(ctx, &vmv1.RebootVMRequest{Vm: ref, Hard: *hard, TimeoutSeconds: secs})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		switch {
		case resp.GetSoftTimedOut():
			fmt.Fprintf(c.stdout, "%s: reset (hard): the guest did not restart within %s\n", pos[0], *timeout)
		case resp.GetMethod() == vmv1.RebootMethod_REBOOT_METHOD_HARD:
			fmt.Fprintf(c.stdout, "%s: reset (hard)\n", pos[0])
		default:
			fmt.Fprintf(c.stdout, "%s: rebooted by its guest (soft)\n", pos[0])
		}
		return nil
	})
}

func (c *cli) vmPower(args []string) error {
	fs := newFlagSet(c, "vm power", "VM running|paused|shutdown|hibernate",
		"Sets a VM's power state. paused suspends its vCPUs; shutdown presses the ACPI power button and\n"+
			"forces it off after --timeout, keeping its domain and disk; hibernate saves its memory to disk;\n"+
			"running resumes, boots or restores it. The CRI container stays the same and running.")
	timeout := fs.Duration("timeout", 30*time.Second, "shutdown: how long the guest has to power off before it is forced off")
	return c.vmCall(fs, args, 2, func() time.Duration { return max(slowCall, *timeout+time.Minute) }, func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error {
		state, ok := vmv1.PowerState_value["POWER_STATE_"+strings.ToUpper(pos[1])]
		if !ok || state == int32(vmv1.PowerState_POWER_STATE_UNSPECIFIED) {
			return usagef("power state %q: want running, paused, shutdown or hibernate", pos[1])
		}
		secs, err := seconds("--timeout", *timeout)
		if err != nil {
			return err
		}
		resp, err := vms.SetPowerState(ctx, &vmv1.SetPowerStateRequest{Vm: ref, State: vmv1.PowerState(state), TimeoutSeconds: secs})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		forced := ""
		if resp.GetForced() {
			forced = fmt.Sprintf(" (forced off: the guest did not power off within %s)", *timeout)
		}
		fmt.Fprintf(c.stdout, "%s: %s -> %s%s\n", pos[0], powerName(resp.GetPrevious()), powerName(resp.GetState()), forced)
		return nil
	})
}

func fixed(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// seconds turns a duration flag into a request's whole seconds.
func seconds(flagName string, d time.Duration) (uint32, error) {
	if d < time.Second || d%time.Second != 0 {
		return 0, usagef("%s %s: want whole seconds, at least 1s", flagName, d)
	}
	return uint32(d / time.Second), nil
}

// powerName shows a power state as the user typed it.
func powerName(p vmv1.PowerState) string {
	if p == vmv1.PowerState_POWER_STATE_UNSPECIFIED {
		return "-"
	}
	n := strings.ToLower(strings.TrimPrefix(p.String(), "POWER_STATE_"))
	return strings.ToUpper(n[:1]) + n[1:]
}
