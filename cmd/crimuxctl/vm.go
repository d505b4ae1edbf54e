package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	vmv1 "github.com/crimux/crimux/proto/vm/v1"
)

const vmUsage = `Usage: crimuxctl vm COMMAND [flags] ARGS

Commands:
  list                                    the VMs of this node
  get VM                                  one VM: power state, domain state, resources, snapshots
  reboot VM [--hard] [--grace-period 30s]
                                          reboot: the guest restarts itself on the ACPI power button,
                                          or is reset after --grace-period; --hard resets at once
  power VM STATE [--grace-period 30s]     set the power state: running, paused, shutdown, hibernate
                                          (shutdown: the guest is forced off after --grace-period)
  snapshot create VM NAME [--description TEXT]
  snapshot list VM
  snapshot restore VM NAME
  snapshot delete VM NAME
  migrate VM TARGET --to ENDPOINT         move a running VM, live, to TARGET (a VM pod made with
                                          crimux.io/migrate-from) on the node whose crimux is ENDPOINT

VM is a pod sandbox ID or container ID as crictl shows them (vm--...), or
namespace/name. Whatever the power state, the VM stays the same running
CRI container for kubelet.

--timeout (before or after the command) is how long the command waits at
most before it gives up; --grace-period is how long the guest gets to
reboot or power off by itself. reboot and power wait --grace-period plus
a minute, at least 2m, unless --timeout says otherwise.

Run "crimuxctl vm COMMAND --help" for the flags of a command.
`

// The deadlines of commands that wait on a guest or write its memory,
// unless --timeout chose one. A command that waits on a guest for its
// grace period waits a minute more than it (guestCall).
const (
	slowCall     = 2 * time.Minute
	snapshotCall = 5 * time.Minute
)

// guestCallHelp is guestCall as the help says it.
var guestCallHelp = "--grace-period + 1m, at least " + short(slowCall)

// guestCall is the deadline of a command that gives the guest grace to
// reboot or power off by itself, unless --timeout chose one.
func guestCall(grace time.Duration) time.Duration { return max(slowCall, grace+time.Minute) }

// defaultGrace is how long a guest has to reboot or power off by itself
// unless --grace-period says otherwise (the VM API's default too).
const defaultGrace = 30 * time.Second

// graceFlag is --grace-period: how long the guest has to reboot or power
// off by itself before the VM is reset or forced off. Whole seconds, at
// least one: a number of seconds (as kubectl delete --grace-period) or a
// duration.
type graceFlag time.Duration

func (g *graceFlag) String() string { return time.Duration(*g).String() }

func (g *graceFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if n, nerr := strconv.ParseInt(s, 10, 64); nerr == nil && n <= math.MaxUint32 {
		d, err = time.Duration(n)*time.Second, nil
	}
	if err != nil || d < time.Second || d%time.Second != 0 || d/time.Second > math.MaxUint32 {
		return errors.New("want whole seconds, at least 1s, such as 30, 30s or 2m")
	}
	*g = graceFlag(d)
	return nil
}

// gracePeriod defines --grace-period on fs, saying what it does there.
func gracePeriod(fs *flag.FlagSet, what string) *time.Duration {
	g := graceFlag(defaultGrace)
	fs.Var(&g, "grace-period", what+", in whole `seconds` (30, 30s, 2m)")
	deadlineHelp(fs, guestCallHelp)
	return (*time.Duration)(&g)
}

// graceDeadline is the deadline of a command that may give the guest
// grace (usesGrace: it does), unless --timeout chose one; it warns when
// that one may end the command before the grace ends.
func (c *cli) graceDeadline(grace time.Duration, usesGrace bool) time.Duration {
	if usesGrace && c.timeoutSet && c.timeout <= grace {
		fmt.Fprintf(c.stderr, "crimuxctl: note: --timeout %s (how long this command waits) is not longer than --grace-period %s "+
			"(how long the guest gets): the command may give up first\n", c.timeout, grace)
	}
	return guestCall(grace)
}

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

// vmCall parses a command's arguments (the first one the VM), checks
// them, connects with the deadline the parsed flags and arguments call
// for, and runs call with a VM API client.
func (c *cli) vmCall(fs *flag.FlagSet, args []string, want int, deadline func() time.Duration,
	call func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error,
	checks ...func(pos []string) error) error {
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
	for _, check := range checks {
		if err := check(pos); err != nil {
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
	fs := newFlagSet(c, "vm reboot", "VM", "Reboots a running VM: the ACPI power button first (the guest restarts itself), a reset\n"+
		"if it has not within --grace-period. The CRI container stays the same and running.")
	hard := fs.Bool("hard", false, "reset the VM at once, without asking the guest")
	grace := gracePeriod(fs, "how long the guest has to restart itself before the VM is reset")
	deadline := func() time.Duration { return c.graceDeadline(*grace, !*hard) }
	return c.vmCall(fs, args, 1, deadline, func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error {
		resp, err := vms.RebootVM(ctx, &vmv1.RebootVMRequest{Vm: ref, Hard: *hard, TimeoutSeconds: seconds(*grace)})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		switch {
		case resp.GetSoftTimedOut():
			fmt.Fprintf(c.stdout, "%s: reset (hard): the guest did not restart within %s\n", pos[0], *grace)
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
			"forces it off after --grace-period, keeping its domain and disk; hibernate saves its memory to disk;\n"+
			"running resumes, boots or restores it. The CRI container stays the same and running.")
	grace := gracePeriod(fs, "shutdown: how long the guest has to power off before it is forced off")
	var state int32
	deadline := func() time.Duration {
		return c.graceDeadline(*grace, state == int32(vmv1.PowerState_POWER_STATE_SHUTDOWN))
	}
	return c.vmCall(fs, args, 2, deadline, func(ctx context.Context, vms vmv1.VMServiceClient, ref *vmv1.VMRef, pos []string) error {
		resp, err := vms.SetPowerState(ctx, &vmv1.SetPowerStateRequest{Vm: ref, State: vmv1.PowerState(state), TimeoutSeconds: seconds(*grace)})
		if err != nil {
			return err
		}
		if c.machineReadable() {
			return c.printProto(resp)
		}
		forced := ""
		if resp.GetForced() {
			forced = fmt.Sprintf(" (forced off: the guest did not power off within %s)", *grace)
		}
		fmt.Fprintf(c.stdout, "%s: %s -> %s%s\n", pos[0], powerName(resp.GetPrevious()), powerName(resp.GetState()), forced)
		return nil
	}, func(pos []string) error {
		var ok bool
		state, ok = vmv1.PowerState_value["POWER_STATE_"+strings.ToUpper(pos[1])]
		if !ok || state == int32(vmv1.PowerState_POWER_STATE_UNSPECIFIED) {
			return usagef("power state %q: want running, paused, shutdown or hibernate", pos[1])
		}
		return nil
	})
}

func fixed(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// seconds is a grace period (whole seconds, graceFlag) as a request's
// seconds.
func seconds(d time.Duration) uint32 { return uint32(d / time.Second) }

// powerName shows a power state as the user typed it.
func powerName(p vmv1.PowerState) string {
	if p == vmv1.PowerState_POWER_STATE_UNSPECIFIED {
		return "-"
	}
	n := strings.ToLower(strings.TrimPrefix(p.String(), "POWER_STATE_"))
	return strings.ToUpper(n[:1]) + n[1:]
}
