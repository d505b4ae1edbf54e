package main

import "fmt"

// command is a word of crimuxctl's command line: a command, which runs,
// or a group of commands (vm, vm snapshot, template, store). run()
// dispatches on this table and completion reads it, so a command added
// here is both run and completed.
//
// A command's run parses its flags (newFlagSet, then parse) before it
// does anything else: completion runs it with -h to read its flag set.
type command struct {
	name    string
	aliases []string
	run     func(c *cli, args []string) error // nil for a group
	usage   string                            // a group's help
	subs    []command                         // a group's commands
	args    []string                          // words completion offers for the arguments
}

// commands are crimuxctl's commands, in the order completion offers
// them.
func commands() []command {
	return []command{
		{name: "version", run: func(c *cli, args []string) error { return c.runtimeCommand("version", args) }},
		{name: "runtimes", run: func(c *cli, args []string) error { return c.runtimeCommand("runtimes", args) }},
		{name: "vm", usage: vmUsage, subs: []command{
			{name: "list", aliases: []string{"ls"}, run: (*cli).vmList},
			{name: "get", run: (*cli).vmGet},
			{name: "reboot", run: (*cli).vmReboot},
			{name: "power", run: (*cli).vmPower},
			{name: "snapshot", aliases: []string{"snapshots"}, usage: snapshotUsage, subs: []command{
				{name: "create", run: (*cli).snapshotCreate},
				{name: "list", aliases: []string{"ls"}, run: (*cli).snapshotList},
				{name: "restore", run: (*cli).snapshotRestore},
				{name: "delete", aliases: []string{"rm"}, run: (*cli).snapshotDelete},
			}},
			{name: "migrate", run: (*cli).vmMigrate},
		}},
		{name: "gc", run: (*cli).gc},
		{name: "template", usage: templateUsage, subs: []command{
			{name: "list", aliases: []string{"ls"}, run: (*cli).templateList},
			{name: "warm", run: (*cli).templateWarm},
			{name: "rm", aliases: []string{"remove"}, run: (*cli).templateRemove},
		}},
		{name: "store", usage: storeUsage, subs: []command{
			{name: "rebuild", run: (*cli).storeRebuild},
		}},
		{name: "completion", run: (*cli).completion, args: shells},
	}
}

// lookup finds the command of cmds that word names, by name or alias.
func lookup(cmds []command, word string) (command, bool) {
	for _, c := range cmds {
		if c.name == word {
			return c, true
		}
		for _, a := range c.aliases {
			if a == word {
				return c, true
			}
		}
	}
	return command{}, false
}

// runCommand runs cmd, named path on the command line ("vm snapshot"),
// with the arguments after its name.
func (c *cli) runCommand(path string, cmd command, args []string) error {
	if cmd.run != nil {
		return cmd.run(c, args)
	}
	if len(args) == 0 || asksHelp(args[:1]) || args[0] == "help" {
		out := c.stderr
		if len(args) > 0 {
			out = c.stdout
		}
		fmt.Fprint(out, cmd.usage)
		if len(args) == 0 {
			return errUsagePrinted
		}
		return nil
	}
	sub, ok := lookup(cmd.subs, args[0])
	if !ok {
		fmt.Fprintf(c.stderr, "crimuxctl %s: unknown command %q\n\n%s", path, args[0], cmd.usage)
		return errUsagePrinted
	}
	return c.runCommand(path+" "+sub.name, sub, args[1:])
}
