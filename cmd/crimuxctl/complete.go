package main

import (
	"flag"
	"io"

	"github.com/crimux/crimux/cmd/crimuxctl/completion"
)

// shells are the shells completion writes a script for.
var shells = completion.Shells

const completionWhat = `Prints the shell's completion script for crimuxctl: its commands, their
subcommands and flags, and the values of -o. Load it in the shell, or install it:

  bash:  source <(crimuxctl completion bash)
         crimuxctl completion bash > /etc/bash_completion.d/crimuxctl
  zsh:   source <(crimuxctl completion zsh)      (after compinit)
         crimuxctl completion zsh > "${fpath[1]}/_crimuxctl"
  fish:  crimuxctl completion fish | source
         crimuxctl completion fish > ~/.config/fish/completions/crimuxctl.fish`

func (c *cli) completion(args []string) error {
	fs := newFlagSet(c, "completion", "bash|zsh|fish", completionWhat)
	noDeadline(fs, "completion prints a script, calling nothing")
	pos, err := c.parse(fs, args, 1)
	if err != nil {
		return err
	}
	if err := completion.Script(c.stdout, pos[0], "crimuxctl", completionTree()); err != nil {
		return usagef("completion: %v", err)
	}
	return nil
}

// completionTree is crimuxctl's command table as completion sees it, with
// the flags each command's own flag set has.
func completionTree() *completion.Command {
	fs, _ := (&cli{stderr: io.Discard}).rootFlagSet()
	return &completion.Command{Name: "crimuxctl", Flags: completion.FlagsOf(fs, flagValues), Subs: completionSubs(commands())}
}

// flagValues are the values completion offers for a flag.
var flagValues = map[string][]string{"o": outputFormats}

func completionSubs(cmds []command) []*completion.Command {
	var out []*completion.Command
	for _, cmd := range cmds {
		n := &completion.Command{Name: cmd.name, Aliases: cmd.aliases, Args: cmd.args, Subs: completionSubs(cmd.subs)}
		if cmd.run != nil {
			n.Flags = commandFlags(cmd)
		}
		out = append(out, n)
	}
	return out
}

// commandFlags are the flags of a command, read from the flag set it
// makes: it is run with -h, which it parses before anything else, by a
// cli that writes nowhere.
func commandFlags(cmd command) []completion.Flag {
	var fs *flag.FlagSet
	probe := &cli{stdout: io.Discard, stderr: io.Discard, output: "table", onFlagSet: func(f *flag.FlagSet) { fs = f }}
	_ = cmd.run(probe, []string{"-h"})
	if fs == nil {
		return nil
	}
	return completion.FlagsOf(fs, flagValues)
}
