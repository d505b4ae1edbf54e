package completion

import (
	"bytes"
	"flag"
	"slices"
	"strings"
	"testing"
)

// testTree is a tool with a group, an alias, a bool and a valued flag,
// and a flag with values.
func testTree() *Command {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Bool("force", false, "")
	fs.String("o", "", "")
	fs.Duration("timeout", 0, "")
	flags := FlagsOf(fs, map[string][]string{"o": {"json", "yaml"}})
	return &Command{Name: "tool", Flags: flags, Subs: []*Command{
		{Name: "disk", Aliases: []string{"disks"}, Subs: []*Command{
			{Name: "list", Flags: flags},
			{Name: "lock", Flags: flags},
		}},
		{Name: "completion", Args: []string{"bash", "zsh"}},
	}}
}

func TestFlagsOf(t *testing.T) {
	want := []Flag{{Name: "force"}, {Name: "o", Valued: true, Values: []string{"json", "yaml"}}, {Name: "timeout", Valued: true}}
	if got := testTree().Flags; len(got) != len(want) {
		t.Fatalf("flags %+v, want %+v", got, want)
	}
	for i, f := range testTree().Flags {
		if f.Name != want[i].Name || f.Valued != want[i].Valued || !slices.Equal(f.Values, want[i].Values) {
			t.Errorf("flag %d %+v, want %+v", i, f, want[i])
		}
	}
}

func TestCandidates(t *testing.T) {
	for _, tc := range []struct {
		words, want []string
	}{
		{nil, []string{"disk", "completion"}},
		{[]string{"d"}, []string{"disk"}},
		{[]string{"disk", "l"}, []string{"list", "lock"}},
		{[]string{"disks", "li"}, []string{"list"}},                           // an alias is followed
		{[]string{"--timeout", "disk", "disk", ""}, []string{"list", "lock"}}, // "disk" was the value
		{[]string{"--force", "disk", ""}, []string{"list", "lock"}},
		{[]string{"-timeout=1s", "disk", ""}, []string{"list", "lock"}},
		{[]string{"disk", "list", "-"}, []string{"--force", "-o", "--timeout"}},
		{[]string{"disk", "list", "--o", ""}, []string{"json", "yaml"}},
		{[]string{"disk", "list", "-o", "y"}, []string{"yaml"}},
		{[]string{"disk", "list", "--timeout", ""}, nil}, // a value with none to offer
		{[]string{"disk", "list", "x", ""}, nil},
		{[]string{"completion", "z"}, []string{"zsh"}},
		{[]string{"nope", "d"}, []string{"disk"}},
	} {
		if got := Candidates(testTree(), tc.words); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.words, got, tc.want)
		}
	}
}

// TestScript: each shell's script holds the tree's lines and completes
// the command it is made for; an unknown shell is an error naming them.
func TestScript(t *testing.T) {
	for _, shell := range Shells {
		var b bytes.Buffer
		if err := Script(&b, shell, "kubectl-tool", testTree()); err != nil {
			t.Fatalf("%s: %v", shell, err)
		}
		for _, want := range []string{"disk|list lock||", "disks lock|", "disk list -o|json yaml||", "__kubectl_tool_candidates", "kubectl-tool"} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s script lacks %q", shell, want)
			}
		}
	}
	err := Script(&bytes.Buffer{}, "tcsh", "tool", testTree())
	if err == nil || err.Error() != `unknown shell "tcsh": want bash, zsh or fish` {
		t.Errorf("tcsh: %v", err)
	}
}

// TestQuote: a quote in the tree stays in its shell word.
func TestQuote(t *testing.T) {
	if got := quote("bash", "it's|a"); got != `it'\''s|a` {
		t.Errorf("bash: %s", got)
	}
	if got := quote("fish", `it's\`); got != `'it\'s\\'` {
		t.Errorf("fish: %s", got)
	}
}
