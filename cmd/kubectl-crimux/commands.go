package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/crimux/crimux/cmd/crimuxctl/completion"
	"github.com/crimux/crimux/internal/version"
)

// invocation is what a command runs with: the command line's flags and
// where it writes.
type invocation struct {
	ctx            context.Context
	o              options
	stdout, stderr io.Writer
	client         clientFunc
}

// command is one of kubectl crimux's commands. run() dispatches on this
// table and completion reads it, so a command added here is both run and
// completed.
type command struct {
	name string
	run  func(in invocation, args []string) error
	args []string // words completion offers for its arguments
	subs []string // its sub-verbs, which completion offers as commands
}

// requestVerbs are the commands that set a VM pod's request annotation
// (request.go).
var requestVerbs = []string{"start", "stop", "pause", "resume", "hibernate", "reboot", "snapshot", "restore"}

// commands are kubectl crimux's commands, in the order completion offers
// them.
func commands() []command {
	cmds := []command{{name: "migrate", run: migrateCommand}}
	for _, verb := range requestVerbs {
		if verb == "snapshot" { // and its list and delete (snapshot.go)
			cmds = append(cmds, command{name: verb, run: snapshotCommand, subs: snapshotVerbs})
			continue
		}
		cmds = append(cmds, command{name: verb, run: func(in invocation, args []string) error {
			return requestCommand(in.ctx, in.o, verb, args, in.stdout, in.client)
		}})
	}
	return append(cmds,
		command{name: "console", run: func(in invocation, args []string) error { return consoleCommand(in.o, args) }},
		command{name: "version", run: func(in invocation, _ []string) error {
			_, err := fmt.Fprintf(in.stdout, "kubectl-crimux %s\n", version.Version)
			return err
		}},
		command{name: "completion", run: completionScript, args: completion.Shells},
		command{name: "help", run: func(in invocation, _ []string) error {
			_, err := fmt.Fprint(in.stdout, usage)
			return err
		}},
	)
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// commandNames is "migrate, start, ... or help".
func commandNames() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// completeCommand is the hidden command kubectl's plugin completion runs
// (through an executable kubectl_complete-crimux on the PATH): it prints
// the completions of the last of its words, one a line, then cobra's
// directive ":4" (ShellCompDirectiveNoFileComp: no file names either).
const completeCommand = "__complete"

func complete(words []string, stdout io.Writer) {
	for _, c := range completion.Candidates(completionTree(), words) {
		fmt.Fprintln(stdout, c)
	}
	fmt.Fprintln(stdout, ":4")
}

// completionTree is the command table as completion sees it: every
// command takes the flags of the one flag set.
func completionTree() *completion.Command {
	var o options
	flags := completion.FlagsOf(newFlagSet(&o), nil)
	root := &completion.Command{Name: "kubectl-crimux", Flags: flags}
	for _, c := range commands() {
		cmd := &completion.Command{Name: c.name, Flags: flags, Args: c.args}
		for _, s := range c.subs {
			cmd.Subs = append(cmd.Subs, &completion.Command{Name: s, Flags: flags})
		}
		root.Subs = append(root.Subs, cmd)
	}
	return root
}

// completionScript prints the shell's completion script for
// kubectl-crimux.
func completionScript(in invocation, args []string) error {
	if len(args) != 1 {
		return errors.New("completion takes a shell: kubectl crimux completion bash|zsh|fish")
	}
	if err := completion.Script(in.stdout, args[0], "kubectl-crimux", completionTree()); err != nil {
		return fmt.Errorf("completion: %w", err)
	}
	return nil
}
