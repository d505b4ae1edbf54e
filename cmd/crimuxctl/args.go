package main

import (
	"errors"
	"flag"
	"fmt"
)

// errUsagePrinted: the flag package (or parse) already told the user what
// is wrong and printed the command's help; exit 2.
var errUsagePrinted = errors.New("usage printed")

// newFlagSet makes a subcommand's flags: its own, defined by the caller,
// plus -o and --endpoint (so they work after the command too). Its help
// shows the arguments and what the command does.
func newFlagSet(c *cli, name, argsUsage, what string) *flag.FlagSet {
	fs := flag.NewFlagSet("crimuxctl "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	c.globalFlags(fs, c.endpoint, c.output)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: crimuxctl %s [flags] %s\n\n", name, argsUsage)
		if what != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", what)
		}
		fmt.Fprintln(fs.Output(), "Flags:")
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags wherever they are among args ("vm reboot VM --hard"
// and "vm reboot --hard VM" alike; "--" ends them) and returns the
// positional arguments, of which there must be want (-1: any number).
// Help asked for is printed on stdout; on a mistake, the error and the
// help go to stderr.
func (c *cli) parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	if asksHelp(args) {
		fs.SetOutput(c.stdout)
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, flag.ErrHelp
			}
			return nil, errUsagePrinted
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if want >= 0 && len(pos) != want {
		fmt.Fprintf(fs.Output(), "%s: want %d argument(s), got %d\n\n", fs.Name(), want, len(pos))
		fs.Usage()
		return nil, errUsagePrinted
	}
	return pos, nil
}

func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help", "--h":
			return true
		}
	}
	return false
}
