// Package completion is the shell completion of crimux's command-line
// tools (crimuxctl, kubectl-crimux), which parse with the flag package,
// not cobra. A tool describes its commands as a tree, built from the
// same table it dispatches on; from the tree come static scripts for
// bash, zsh and fish (Script) and the candidates for a command line
// (Candidates, which kubectl's plugin completion asks for).
//
// Script and Candidates read the tree through one flattened form, its
// entries: one per command path, with the words that may follow it, its
// flags, and which of them take a value. The scripts carry the entries
// and walk them as Candidates does, so the shells and kubectl complete
// alike.
package completion

import (
	"flag"
	"slices"
	"strings"
)

// Command is one command of a tool, or a group of commands.
type Command struct {
	Name    string
	Aliases []string // other names it runs under; completed paths follow them, but they are not offered
	Flags   []Flag   // the flags it accepts after its name
	Subs    []*Command
	Args    []string // words offered for its arguments (e.g. completion's shells)
}

// Flag is a command's flag.
type Flag struct {
	Name   string   // without dashes
	Valued bool     // takes a value (is not a bool flag)
	Values []string // the values offered for it, if it has a fixed set
}

// FlagsOf lists the flags of fs, with values[name] offered for a flag's
// value.
func FlagsOf(fs *flag.FlagSet, values map[string][]string) []Flag {
	var flags []Flag
	fs.VisitAll(func(f *flag.Flag) {
		b, isBool := f.Value.(interface{ IsBoolFlag() bool })
		flags = append(flags, Flag{Name: f.Name, Valued: !isBool || !b.IsBoolFlag(), Values: values[f.Name]})
	})
	return flags
}

// entry is what may follow one command path: words (subcommands, or
// argument values), flags as typed (--name, or -n for a one-letter name)
// and the names of those that take a value. A path "PATH -NAME" is the
// values of flag NAME after PATH.
type entry struct {
	path                 string
	words, flags, valued []string
}

// entries flattens the tree below root, depth first; the root's path is
// "". A command under an alias gets its own entries too, so that a path
// typed with the alias is followed.
func entries(root *Command) []entry {
	var out []entry
	var walk func(path string, c *Command)
	walk = func(path string, c *Command) {
		e := entry{path: path, words: slices.Clone(c.Args)}
		for _, s := range c.Subs {
			e.words = append(e.words, s.Name)
		}
		var values []entry
		for _, f := range c.Flags {
			e.flags = append(e.flags, typed(f.Name))
			if f.Valued {
				e.valued = append(e.valued, f.Name)
			}
			if len(f.Values) > 0 {
				values = append(values, entry{path: join(path, "-"+f.Name), words: f.Values})
			}
		}
		out = append(append(out, e), values...)
		for _, s := range c.Subs {
			for _, name := range append([]string{s.Name}, s.Aliases...) {
				walk(join(path, name), s)
			}
		}
	}
	walk("", root)
	return out
}

// typed is a flag as users type it: -o, --endpoint (the flag package
// takes one dash or two alike).
func typed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func join(path, word string) string {
	if path == "" {
		return word
	}
	return path + " " + word
}

// Candidates are the completions of the last of words (the word being
// typed, "" for a new one), the words being a command line after the
// tool's name: the subcommands or argument values of the command the
// earlier words name, its flags when the word starts with "-", or a
// flag's values after the flag. Only those that start with the word.
func Candidates(root *Command, words []string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	byPath := map[string]entry{}
	for _, e := range entries(root) {
		byPath[e.path] = e
	}
	at, value := "", ""
	for _, w := range words[:len(words)-1] {
		switch {
		case value != "":
			value = "" // the value of the flag before
		case strings.HasPrefix(w, "-"):
			name := strings.TrimPrefix(strings.TrimPrefix(w, "-"), "-")
			if !strings.Contains(name, "=") && slices.Contains(byPath[at].valued, name) {
				value = join(at, "-"+name)
			}
		default:
			if _, ok := byPath[join(at, w)]; ok {
				at = join(at, w)
			}
		}
	}
	last := words[len(words)-1]
	offered := byPath[at].words
	switch {
	case value != "":
		offered = byPath[value].words
	case strings.HasPrefix(last, "-"):
		offered = byPath[at].flags
	}
	var out []string
	for _, o := range offered {
		if strings.HasPrefix(o, last) {
			out = append(out, o)
		}
	}
	return out
}
