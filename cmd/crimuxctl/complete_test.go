package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crimux/crimux/cmd/crimuxctl/completion"
)

// TestCompletionBashNamesEveryCommand: the bash script offers every
// command of the table at the top, and the subcommands of each group.
func TestCompletionBashNamesEveryCommand(t *testing.T) {
	code, out, errOut := runCLI("completion", "bash")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	root := out[strings.Index(out, "_tree='")+len("_tree='"):]
	root = root[:strings.Index(root, "\n")]
	for _, cmd := range commands() {
		if words := strings.Fields(strings.Split(root, "|")[1]); !slices.Contains(words, cmd.name) {
			t.Errorf("the script's first line %q does not offer %s", root, cmd.name)
		}
	}
	for _, line := range []string{"\nvm|list get reboot power snapshot migrate|", "\nvm snapshot|create list restore delete|",
		"\ntemplate|list warm rm|", "\nstore|rebuild|", "\ncompletion|bash zsh fish|", "\nvm reboot||--endpoint --grace-period --hard -o --timeout|",
		"\ntemplate warm||--cpus --endpoint --memory --namespace -o --timeout|", "\nvm migrate||--endpoint -o --timeout --to|", "\nvm list -o|table json yaml|"} {
		if !strings.Contains(out, line) {
			t.Errorf("the script lacks the line %q", line[1:])
		}
	}
}

// TestCompletionUsage: an unknown shell, or none, is bad usage (exit 2)
// naming the shells there are.
func TestCompletionUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"completion", "tcsh"}, `unknown shell "tcsh": want bash, zsh or fish`},
		{[]string{"completion"}, "want 1 argument"},
		{[]string{"completion", "bash", "zsh"}, "want 1 argument"},
	} {
		code, out, errOut := runCLI(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, out, errOut, exitUsage, tc.want)
		}
	}
	for _, shell := range shells {
		if code, out, _ := runCLI("completion", shell); code != exitOK || !strings.Contains(out, "crimuxctl") {
			t.Errorf("completion %s: exit %d", shell, code)
		}
	}
}

// completionLines are command lines (after crimuxctl) and what completes
// their last word.
var completionLines = []struct {
	words []string
	want  []string
}{
	{[]string{""}, []string{"version", "runtimes", "vm", "gc", "template", "store", "completion"}},
	{[]string{"v"}, []string{"version", "vm"}},
	{[]string{"vm", "p"}, []string{"power"}},
	{[]string{"vm", "snapshot", ""}, []string{"create", "list", "restore", "delete"}},
	{[]string{"vm", "snapshots", "c"}, []string{"create"}},
	{[]string{"vm", "reboot", "vm--c1", "--h"}, []string{"--hard"}},
	{[]string{"--endpoint", "unix:///x", "vm", "l"}, []string{"list"}},
	{[]string{"-o", ""}, []string{"table", "json", "yaml"}},
	{[]string{"vm", "list", "-o", "y"}, []string{"yaml"}},
	{[]string{"template", "w"}, []string{"warm"}},
	{[]string{"template", "warm", "img", "--m"}, []string{"--memory"}},
	{[]string{"gc", "--"}, []string{"--adopt", "--delete", "--endpoint", "--timeout"}},
	{[]string{"vm", "power", "vm--c1", "shutdown", "--g"}, []string{"--grace-period"}},
	{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}},
	{[]string{"vm", "get", ""}, nil},
	{[]string{"frob", ""}, []string{"version", "runtimes", "vm", "gc", "template", "store", "completion"}},
}

// TestCompletionCandidates: the candidates of a command line come from
// the table and each command's own flags.
func TestCompletionCandidates(t *testing.T) {
	tree := completionTree()
	for _, tc := range completionLines {
		if got := completion.Candidates(tree, tc.words); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.words, got, tc.want)
		}
	}
}

// TestCompletionScriptsComplete: each shell found here, with the script
// loaded, completes each line as Candidates does.
func TestCompletionScriptsComplete(t *testing.T) {
	for _, shell := range shells {
		t.Run(shell, func(t *testing.T) {
			if _, err := exec.LookPath(shell); err != nil {
				t.Skipf("no %s here", shell)
			}
			script := filepath.Join(t.TempDir(), "crimuxctl."+shell)
			_, out, _ := runCLI("completion", shell)
			if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, tc := range completionLines {
				got := shellComplete(t, shell, script, tc.words)
				want := slices.Clone(tc.want)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("%s %q: %q, want %q", shell, tc.words, got, want)
				}
			}
		})
	}
}

// shellComplete runs shell's completion of crimuxctl's words, sorted: the
// bash function complete calls; in zsh, whose compadd only runs in the
// line editor, the candidates compadd would filter; fish's complete -C.
func shellComplete(t *testing.T, shell, script string, words []string) []string {
	t.Helper()
	var cmd *exec.Cmd
	switch shell {
	case "bash":
		cmd = exec.Command("bash", append([]string{"--norc", "-c", `source "$1"; shift; COMP_WORDS=(crimuxctl "$@"); COMP_CWORD=$#
			_crimuxctl; printf '%s\n' "${COMPREPLY[@]}"`, "bash", script}, words...)...)
	case "zsh":
		cmd = exec.Command("zsh", append([]string{"-f", "-c", `compdef() { :; }; source "$1"; shift; __crimuxctl_candidates "$@"`,
			"zsh", script}, words...)...)
	case "fish":
		// The line goes in the environment: fish would take its words
		// for options of its own.
		cmd = exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C "crimuxctl $LINE"`, script)
		cmd.Env = append(os.Environ(), "LINE="+strings.Join(words, " "))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", shell, words, err, out)
	}
	var got []string
	for _, w := range strings.Fields(string(out)) { // zsh's are on one line
		if strings.HasPrefix(w, words[len(words)-1]) {
			got = append(got, w)
		}
	}
	slices.Sort(got)
	return got
}
