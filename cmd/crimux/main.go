// Command crimux is the CRI endpoint kubelet points at. It serves CRI v1 on
// a unix socket and routes each pod to the runtime that runs it: containers
// to containerd, VMs to libvirt.
//
//	crimux [flags]            run the daemon
//	crimux config default     print the commented default config
//	crimux version            print the version (also --version)
//	crimux config check FILE  validate a config file without starting
//
// As a systemd service (systemd/crimux.service, Type=notify) it says
// READY=1 once its socket listens, pings the watchdog while the primary
// runtime answers, and reloads its config on SIGHUP. The files: main.go
// (flags, config), run.go (wiring, the serve loop), health.go (health loop,
// watchdog), reload.go (SIGHUP), notify.go (sd_notify).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/runtimes/libvirt/virtiofs"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "config":
			os.Exit(configCmd(os.Args[2:]))
		case "reload":
			os.Exit(reloadCommand(os.Args[2:], os.Stdout, os.Stderr))
		case virtiofs.HelperCommand: // run by crimux itself: runtimes/libvirt/virtiofs
			os.Exit(virtiofs.HelperMain(os.Args[2:]))
		}
		if asksVersion(os.Args[1]) {
			fmt.Printf("%s %s (CRI %s)\n", version.Name, version.Version, version.APIVersion)
			return
		}
	}
	os.Exit(run(os.Args[1:]))
}

// asksVersion: arg asks for the version (crimux version, --version, as
// every other binary of crimux takes it).
func asksVersion(arg string) bool {
	return arg == "version" || arg == "--version" || arg == "-version"
}

func configCmd(args []string) int { return configCommand(args, os.Stdout, os.Stderr) }

// configCommand is crimux config: default prints the commented defaults;
// check FILE reads and validates FILE as crimux would at start, without
// starting (exit 1 and every problem named if it is not valid).
func configCommand(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && args[0] == "default":
		fmt.Fprint(stdout, config.DefaultTOML)
		return 0
	case len(args) == 2 && args[0] == "check":
		cfg, err := config.Load(args[1], true)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", args[1], err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: valid\n", args[1])
		return 0
	}
	fmt.Fprintln(stderr, "usage: crimux config default | crimux config check FILE")
	return 2
}

// flags are the settings people change most; each overrides its config key.
type flags struct {
	configPath, listen, stateDir, containerd, libvirtURI, vmAccel, cniConfDir, logLevel, logFormat, metricsAddress string
}

func parseFlags(args []string) (flags, *flag.FlagSet, error) {
	var f flags
	fs := flag.NewFlagSet("crimux", flag.ContinueOnError)
	fs.StringVar(&f.configPath, "config", config.DefaultPath, "config file (TOML); crimux config default prints one")
	fs.StringVar(&f.listen, "listen", "", "unix socket to serve CRI and the VM API on (default /run/crimux/crimux.sock)")
	fs.StringVar(&f.stateDir, "state-dir", "", "directory of crimux's persistent state (default /var/lib/crimux)")
	fs.StringVar(&f.containerd, "containerd-endpoint", "", "containerd CRI endpoint (default unix:///run/containerd/containerd.sock)")
	fs.StringVar(&f.libvirtURI, "libvirt-uri", "", "libvirtd URI of the VM runtime (default qemu:///system)")
	fs.StringVar(&f.vmAccel, "vm-accel", "", "VM accelerator: auto, kvm or tcg (default auto)")
	fs.StringVar(&f.cniConfDir, "cni-conf-dir", "", "CNI network config dir for VM pods, as containerd's (default /etc/cni/net.d)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (default info)")
	fs.StringVar(&f.logFormat, "log-format", "", "text or json (default text)")
	fs.StringVar(&f.metricsAddress, "metrics-address", "", "serve Prometheus metrics over HTTP on host:port, e.g. 127.0.0.1:9117 (default: off)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: crimux [flags] | crimux config default | crimux config check FILE | crimux reload --pid PID | crimux version\n\nFlags override the config file:\n")
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	return f, fs, err
}

// loadConfig reads the config file and applies the flags over it; a reload
// (SIGHUP) calls it again, so flags keep overriding the file.
func loadConfig(f flags, fs *flag.FlagSet) (config.Config, error) {
	explicit := false
	fs.Visit(func(fl *flag.Flag) { explicit = explicit || fl.Name == "config" })
	cfg, err := config.Load(f.configPath, explicit)
	if err != nil {
		return cfg, err
	}
	override(&cfg.Listen, config.SocketPath(f.listen))
	override(&cfg.StateDir, f.stateDir)
	override(&cfg.Containerd.Endpoint, f.containerd)
	override(&cfg.Libvirt.URI, f.libvirtURI)
	override(&cfg.Libvirt.Accel, f.vmAccel)
	override(&cfg.Libvirt.CNIConfDir, f.cniConfDir)
	override(&cfg.LogLevel, f.logLevel)
	override(&cfg.LogFormat, f.logFormat)
	override(&cfg.MetricsAddress, f.metricsAddress)
	return cfg, cfg.Validate()
}

func override(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}
