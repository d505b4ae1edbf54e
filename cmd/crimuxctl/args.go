package main

import (
	"bytes"
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
	if c.onFlagSet != nil {
		c.onFlagSet(fs)
	}
	return fs
}

// parse parses flags wherever they are among args ("vm reboot VM --hard"
// and "vm reboot --hard VM" alike; "--" ends them) and returns the
// positional arguments, of which there must be want (-1: any number).
func (c *cli) parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	var pos []string
	for {
		if err := c.parseFlags(fs, args); err != nil {
			return nil, err
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
		fmt.Fprintf(c.stderr, "%s: want %d argument(s), got %d\n\n", fs.Name(), want, len(pos))
		fs.SetOutput(c.stderr)
		fs.Usage()
		return nil, errUsagePrinted
	}
	return pos, nil
}

// parseFlags parses one run of flags. What the flag package prints goes
// to stdout when help was asked for, to stderr on a mistake.
func (c *cli) parseFlags(fs *flag.FlagSet, args []string) error {
	var out bytes.Buffer
	fs.SetOutput(&out)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = c.stdout.Write(out.Bytes())
		return flag.ErrHelp
	case err != nil:
		_, _ = c.stderr.Write(out.Bytes())
		return errUsagePrinted
	}
	return nil
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
