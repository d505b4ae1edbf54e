package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// runPlugin runs kubectl-crimux with no cluster.
func runPlugin(args ...string) (int, string, string) {
	noClient := func(options) (clients, string, error) { return clients{}, "", errors.New("no cluster here") }
	out, errOut := &syncBuffer{}, &syncBuffer{}
	code := run(context.Background(), args, out, errOut, noClient)
	return code, out.String(), errOut.String()
}

// TestComplete: __complete, kubectl's plugin completion, prints the
// completions of its last word one a line, then ":4"; flags among the
// words are skipped, not parsed.
func TestComplete(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mi"}, "migrate\n"},
		{[]string{"s"}, "start\nstop\nsnapshot\n"},
		{[]string{"re"}, "resume\nreboot\nrestore\n"},
		{[]string{""}, "migrate\nstart\nstop\npause\nresume\nhibernate\nreboot\nsnapshot\nrestore\nconsole\nversion\ncompletion\nhelp\n"},
		{[]string{"-n", "ns1", "con"}, "console\n"},
		{[]string{"migrate", "vm1", "--t"}, "--timeout\n--to\n"},
		{[]string{"migrate", "vm1", "--to", ""}, ""},
		{[]string{"migrate", "vm1", "--ca"}, "--cancel\n"},
		{[]string{"migrate", "vm1", "--cancel", ""}, ""},
		{[]string{"completion", ""}, "bash\nzsh\nfish\n"},
		{[]string{"snapshot", ""}, "create\nlist\ndelete\n"},
		{[]string{"-n", "ns1", "snapshot", "l"}, "list\n"},
		{[]string{"snapshot", "delete", "--ti"}, "--timeout\n"},
		{[]string{"frobnicate", ""}, "migrate\nstart\nstop\npause\nresume\nhibernate\nreboot\nsnapshot\nrestore\nconsole\nversion\ncompletion\nhelp\n"},
		{[]string{"--bogus", "x"}, ""},
		{nil, "migrate\nstart\nstop\npause\nresume\nhibernate\nreboot\nsnapshot\nrestore\nconsole\nversion\ncompletion\nhelp\n"},
	} {
		code, out, errOut := runPlugin(append([]string{"__complete"}, tc.args...)...)
		if code != 0 || out != tc.want+":4\n" || errOut != "" {
			t.Errorf("__complete %q: exit %d, stdout %q, stderr %q; want 0 and %q", tc.args, code, out, errOut, tc.want+":4\n")
		}
	}
}

// TestCompletionScript: completion writes the shell's script, naming
// every command; an unknown shell is an error (exit 1, as every usage
// error of kubectl-crimux) naming the shells there are.
func TestCompletionScript(t *testing.T) {
	code, out, errOut := runPlugin("completion", "bash")
	if code != 0 || !strings.Contains(out, "complete -F _kubectl_crimux kubectl-crimux") {
		t.Fatalf("completion bash: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	_, root, _ := strings.Cut(out, "__kubectl_crimux_tree='|")
	root, _, _ = strings.Cut(root, "|")
	for _, c := range commands() {
		if !slices.Contains(strings.Fields(root), c.name) {
			t.Errorf("the bash script's first line offers %q, not %s", root, c.name)
		}
	}
	if code, out, _ := runPlugin("completion", "zsh"); code != 0 || !strings.HasPrefix(out, "#compdef kubectl-crimux\n") {
		t.Errorf("completion zsh: exit %d:\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"completion", "tcsh"}, `kubectl-crimux: completion: unknown shell "tcsh": want bash, zsh or fish`},
		{[]string{"completion"}, "completion takes a shell"},
	} {
		code, out, errOut := runPlugin(tc.args...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestUnknownCommandNamesTheTable: the error of an unknown command lists
// the commands of the table.
func TestUnknownCommandNamesTheTable(t *testing.T) {
	_, _, errOut := runPlugin("frobnicate")
	want := `unknown command "frobnicate" (want migrate, start, stop, pause, resume, hibernate, reboot, snapshot, restore, console, version, completion or help;`
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}
