// Command crimuxctl is the command-line client of crimux: runtime status
// and the VM API (crimux.vm.v1.VMService: VMs, reboot, snapshots, power
// state), over crimux's socket.
//
//	crimuxctl [--endpoint unix:///run/crimux/crimux.sock] [-o table|json|yaml] [--timeout 30s] COMMAND
//
// --timeout, before or after the command, is the command's deadline: how
// long it waits at most before it gives up. How long a guest gets to
// reboot or power off by itself is --grace-period (vm reboot, vm power).
//
// Commands: version, runtimes, vm list|get|reboot|power|snapshot|migrate
// (see "crimuxctl vm --help"), gc [--adopt|--delete KIND/NAME] (resources
// of another crimux identity), template list|warm|rm (VM templates, for
// instant start), store rebuild (a damaged VM store made again, with
// crimux stopped: it talks to libvirtd, not to crimux), completion
// bash|zsh|fish (a shell completion script). A VM is named
// by its pod sandbox ID or container ID as crictl shows them, or by
// namespace/name.
//
// Exit codes: 0 success, 1 the call failed (the gRPC code and message are
// printed), 2 bad usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/cri/statusinfo"
	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/runtimes/libvirt/store/rebuild"
)

// Exit codes scripts can rely on.
const (
	exitOK    = 0
	exitCall  = 1
	exitUsage = 2
)

const usage = `Usage: crimuxctl [flags] COMMAND [ARGS]

Commands:
  version    crimuxctl's version, then the daemon's: name, version and CRI
             API version (crimuxctl --version: crimuxctl's alone)
  runtimes   the runtime registry: each runtime, its type, handlers, primary, readiness
  vm         VMs: list, get, reboot, power, snapshot, migrate
             (crimuxctl vm --help)
  gc         resources of another crimux identity: list them, or --adopt or
             --delete one, e.g. domain/crimux-<id> (crimuxctl gc --help)
  template   VM templates (instant start): list, warm IMAGE, rm KEY
             (crimuxctl template --help)
  store rebuild
             with crimux stopped: rebuild a damaged VM store from libvirt's
             domains and the state dir (crimuxctl store rebuild --help)
  completion bash|zsh|fish
             the shell's completion script, e.g. source <(crimuxctl completion bash)

A VM is named by its pod sandbox ID or container ID as crictl shows them
(vm--...), or by its pod's namespace/name.

--timeout is how long a command waits at most before it gives up (its
deadline); how long a guest gets to reboot or power off by itself is
--grace-period (vm reboot, vm power).

Exit codes: 0 success, 1 the call failed (gRPC code and message printed
on stderr), 2 bad usage (a bad flag value included).

Flags (-endpoint, -o and -timeout are also accepted after the command):
`

// cli is one invocation: its global options and where it writes.
type cli struct {
	endpoint string
	output   string
	// timeout is the command's deadline (--timeout); timeoutSet says the
	// user chose it, else a command that waits long may wait longer.
	timeout    time.Duration
	timeoutSet bool
	stdout     io.Writer
	stderr     io.Writer
	// libvirt connects to libvirtd, for store rebuild (a fake in tests).
	libvirt func(uri string) (rebuild.Domains, func() error, error)
	// onFlagSet, if set, is given each command's flag set as it is made:
	// completion reads the flags there.
	onFlagSet func(*flag.FlagSet)
}

// usageError is bad usage: exit 2, with the command's help.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, libvirt: dialLibvirt}
	fs, showVersion := c.rootFlagSet()
	if err := c.parseFlags(fs, args); err != nil {
		return c.exit(err)
	}
	if *showVersion {
		fmt.Fprintf(stdout, "crimuxctl %s\n", version.Version)
		return 0
	}
	fs.SetOutput(stderr)
	if fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	cmd, ok := lookup(commands(), fs.Arg(0))
	if !ok {
		fmt.Fprintf(stderr, "crimuxctl: unknown command %q\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	return c.exit(c.runCommand(cmd.name, cmd, fs.Args()[1:]))
}

// rootFlagSet is crimuxctl's flags before the command, and -version's
// value.
func (c *cli) rootFlagSet() (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("crimuxctl", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	c.timeout = defaultTimeout
	c.globalFlags(fs, "unix:///run/crimux/crimux.sock", "table")
	deadlineHelp(fs, short(defaultTimeout)+";\ncommands that wait longer default to more: vm reboot and vm power "+
		guestCallHelp+",\nvm snapshot create|restore|delete and gc --adopt|--delete "+short(snapshotCall)+
		", template warm "+short(templateWarmCall)+", vm migrate "+short(migrateCall))
	showVersion := fs.Bool("version", false, "print crimuxctl's own version and exit (no daemon needed)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	return fs, showVersion
}

// exit maps an error to the exit code, printing it.
func (c *cli) exit(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsagePrinted):
		return exitUsage
	case errors.As(err, &ue):
		fmt.Fprintln(c.stderr, "crimuxctl:", ue.msg)
		return exitUsage
	}
	if st, ok := status.FromError(err); ok {
		fmt.Fprintf(c.stderr, "crimuxctl: %s: %s\n", st.Code(), st.Message())
	} else {
		fmt.Fprintln(c.stderr, "crimuxctl:", err)
	}
	return exitCall
}

// globalFlags defines the flags every command accepts, before or after it.
func (c *cli) globalFlags(fs *flag.FlagSet, endpoint, output string) {
	fs.StringVar(&c.endpoint, "endpoint", endpoint, "crimux socket")
	fs.StringVar(&c.output, "o", output, "output format: "+orList(outputFormats))
	fs.Var(deadlineFlag{c}, "timeout", timeoutUsage+" (default "+short(defaultTimeout)+")")
}

// defaultTimeout is a command's deadline unless --timeout sets it or the
// command waits longer (dial's minTimeout).
const defaultTimeout = 30 * time.Second

// timeoutUsage is what --timeout means, wherever it is given: one
// meaning for every command.
const timeoutUsage = "the command's deadline: how long it waits at most before it gives up, a `duration` such as 90s or 5m"

// deadlineHelp says in fs's help what --timeout defaults to for its
// command (a command that waits long defaults to more).
func deadlineHelp(fs *flag.FlagSet, def string) {
	fs.Lookup("timeout").Usage = timeoutUsage + " (default " + def + ")"
}

// short is d as the help says it: 5m, not 5m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// noDeadline says in fs's help that --timeout, accepted as everywhere,
// bounds nothing there: the command calls no crimux.
func noDeadline(fs *flag.FlagSet, why string) {
	fs.Lookup("timeout").Usage = "a `duration`, accepted as by every command; unused: " + why
}

// deadlineFlag is --timeout, before the command or after it: a positive
// duration, which the user then chose (timeoutSet). Its help states the
// default (String is empty so that the flag package adds none).
type deadlineFlag struct{ c *cli }

func (f deadlineFlag) String() string { return "" }

func (f deadlineFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return errors.New("want a positive duration, such as 90s or 5m")
	}
	f.c.timeout, f.c.timeoutSet = d, true
	return nil
}

// dial connects to crimux and returns a context with the call's deadline
// (at least minTimeout when the user did not choose one).
func (c *cli) dial(minTimeout time.Duration) (*grpc.ClientConn, context.Context, context.CancelFunc, error) {
	if err := c.checkOutput(); err != nil {
		return nil, nil, nil, err
	}
	conn, err := grpc.NewClient(c.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, nil, err
	}
	timeout := c.timeout
	if !c.timeoutSet && minTimeout > timeout {
		timeout = minTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	return conn, ctx, func() { cancel(); conn.Close() }, nil
}

func (c *cli) runtimeCommand(cmd string, args []string) error {
	fs := newFlagSet(c, cmd, "", "")
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	conn, ctx, done, err := c.dial(0)
	if err != nil {
		return err
	}
	defer done()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	if cmd == "version" {
		return c.version(ctx, rs)
	}
	return c.runtimes(ctx, rs)
}

// versions are crimuxctl's own version and the daemon's answer (nil when
// it did not answer), as -o json and -o yaml print them.
type versions struct {
	Client string                      `json:"client"`
	Server *runtimeapi.VersionResponse `json:"server,omitempty"`
}

// version prints crimuxctl's version first, whatever happens, then the
// daemon's; a daemon that does not answer is an error after it.
func (c *cli) version(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
	v, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
	if c.machineReadable() {
		if perr := c.printJSON(versions{Client: version.Version, Server: v}); perr != nil {
			return perr
		}
		return err
	}
	fmt.Fprintf(c.stdout, "Client: crimuxctl %s\n", version.Version)
	if err != nil {
		return fmt.Errorf("server at %s: %w", c.endpoint, err)
	}
	fmt.Fprintf(c.stdout, "Server: %s %s (CRI %s)\n", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	return nil
}

func (c *cli) runtimes(ctx context.Context, rs runtimeapi.RuntimeServiceClient) error {
	st, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return err
	}
	var info statusinfo.Info
	if err := json.Unmarshal([]byte(st.Info[statusinfo.Key]), &info); err != nil {
		return fmt.Errorf("status info has no crimux runtimes: %w", err)
	}
	if c.machineReadable() {
		return c.printJSON(info.Runtimes)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tTYPE\tHANDLERS\tPRIMARY\tREADY\tREASON")
	for _, r := range info.Runtimes {
		fmt.Fprintf(w, "%s\t%s\t%v\t%v\t%v\t%s\n", r.Name, r.Type, r.Handlers, r.Primary, r.Ready, r.Reason)
	}
	return w.Flush()
}
