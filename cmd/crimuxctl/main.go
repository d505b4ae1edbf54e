// Command crimuxctl is the command-line client of crimux: runtime status
// now, the VM API (reboot, snapshots, power state) as it lands.
//
//	crimuxctl [--endpoint unix:///run/crimux/crimux.sock] [-o table|json] version | runtimes
//
// Exit codes: 0 success, 1 the call failed, 2 bad usage.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const usage = `Usage: crimuxctl [flags] COMMAND

Commands:
  version    crimux's name, version and CRI API version
  runtimes   the runtime registry: each runtime, its type, handlers, primary, readiness

Flags:
`

func main() {
	fs := flag.NewFlagSet("crimuxctl", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "unix:///run/crimux/crimux.sock", "crimux socket")
	output := fs.String("o", "table", "output format: table or json")
	timeout := fs.Duration("timeout", 30*time.Second, "deadline of the call")
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() != 1 || (*output != "table" && *output != "json") {
		fs.Usage()
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	switch fs.Arg(0) {
	case "version":
		err = version(ctx, rs, *output)
	case "runtimes":
		err = runtimes(ctx, rs, *output)
	default:
		fmt.Fprintf(os.Stderr, "crimuxctl: unknown command %q\n", fs.Arg(0))
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "crimuxctl:", err)
	os.Exit(1)
}

func version(ctx context.Context, rs runtimeapi.RuntimeServiceClient, output string) error {
	v, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return err
	}
	if output == "json" {
		return printJSON(v)
	}
	fmt.Printf("%s %s (CRI %s)\n", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)
	return nil
}

type runtimeRow struct {
	Name     string   `json:"name"`
	Type     string   `json:"type"`
	Handlers []string `json:"handlers"`
	Primary  bool     `json:"primary"`
	Ready    bool     `json:"ready"`
	Reason   string   `json:"reason,omitempty"`
	Message  string   `json:"message,omitempty"`
}

func runtimes(ctx context.Context, rs runtimeapi.RuntimeServiceClient, output string) error {
	st, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return err
	}
	var info struct {
		Runtimes []runtimeRow `json:"runtimes"`
	}
	if err := json.Unmarshal([]byte(st.Info["crimux"]), &info); err != nil {
		return fmt.Errorf("status info has no crimux runtimes: %w", err)
	}
	if output == "json" {
		return printJSON(info.Runtimes)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tTYPE\tHANDLERS\tPRIMARY\tREADY\tREASON")
	for _, r := range info.Runtimes {
		fmt.Fprintf(w, "%s\t%s\t%v\t%v\t%v\t%s\n", r.Name, r.Type, r.Handlers, r.Primary, r.Ready, r.Reason)
	}
	return w.Flush()
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
