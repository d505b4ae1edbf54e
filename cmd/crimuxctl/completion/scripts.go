package completion

import (
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Shells are the shells Script writes for.
var Shells = []string{"bash", "zsh", "fish"}

// Script writes the completion script of the tool named command, whose
// commands are root's, for shell; an error names the shells there are.
func Script(w io.Writer, shell, command string, root *Command) error {
	var tmpl string
	switch shell {
	case "bash":
		tmpl = bashScript
	case "zsh":
		tmpl = zshScript
	case "fish":
		tmpl = fishScript
	default:
		return fmt.Errorf("unknown shell %q: want %s or %s", shell, strings.Join(Shells[:len(Shells)-1], ", "), Shells[len(Shells)-1])
	}
	var lines []string
	for _, e := range entries(root) {
		line := strings.Join([]string{e.path, strings.Join(e.words, " "), strings.Join(e.flags, " "), strings.Join(e.valued, " ")}, "|")
		lines = append(lines, quote(shell, line))
	}
	sep := "\n"
	if shell == "fish" {
		sep = " \\\n\t"
	}
	r := strings.NewReplacer("@CMD@", command, "@FN@", identifier(command), "@TREE@", strings.Join(lines, sep))
	_, err := io.WriteString(w, r.Replace(tmpl))
	return err
}

// quote makes a line of the tree one shell word. In bash and zsh the
// lines are one single-quoted word together, opened and closed by the
// script.
func quote(shell, line string) string {
	if shell == "fish" {
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(line) + "'"
	}
	return strings.ReplaceAll(line, "'", `'\''`)
}

var notIdentifier = regexp.MustCompile(`[^A-Za-z0-9_]`)

// identifier is command made a shell function name: kubectl-crimux is
// kubectl_crimux.
func identifier(command string) string { return notIdentifier.ReplaceAllString(command, "_") }

// shTree, shEntry and shCandidates are the parts bash and zsh share: the
// tree, one entry's field, and the walk of Candidates.
const shTree = `# The command tree: a line per command path, "PATH|WORDS|FLAGS|VALUED":
# what may follow the path, its flags, and the flags that take a value.
__@FN@_tree='@TREE@'

# __@FN@_entry PATH FIELD prints field FIELD (1 words, 2 flags, 3 valued
# flags) of PATH's line; it fails when PATH is no command.
__@FN@_entry() {
	local p w f v
	while IFS='|' read -r p w f v; do
		[[ $p == "$1" ]] || continue
		case $2 in
		1) printf '%s\n' "$w" ;;
		2) printf '%s\n' "$f" ;;
		3) printf '%s\n' "$v" ;;
		esac
		return 0
	done <<<"$__@FN@_tree"
	return 1
}

# __@FN@_candidates WORD... prints what may replace the last WORD, given
# the words before it (after the command's name), unfiltered.
__@FN@_candidates() {
	local at="" value="" w n
	while (($# > 1)); do
		w=$1
		shift
		[[ $w == "=" ]] && continue # bash splits --flag=value at "="
		if [[ -n $value ]]; then
			value=""
			continue
		fi
		case $w in
		-*=*) ;;
		-*)
			n=${w#-}
			n=${n#-}
			[[ -n $n && " $(__@FN@_entry "$at" 3) " == *" $n "* ]] && value="${at:+$at }-$n"
			;;
		*) __@FN@_entry "${at:+$at }$w" 1 >/dev/null && at="${at:+$at }$w" ;;
		esac
	done
	if [[ -n $value ]]; then
		__@FN@_entry "$value" 1
	elif [[ $1 == -* ]]; then
		__@FN@_entry "$at" 2
	else
		__@FN@_entry "$at" 1
	fi
}
`

const bashScript = `# bash completion for @CMD@, written by "@CMD@ completion bash".
# Load it with: source <(@CMD@ completion bash)
` + shTree + `
_@FN@() {
	local cur=${COMP_WORDS[COMP_CWORD]}
	[[ $cur == "=" ]] && cur=""
	# Word splitting is safe: no candidate has a space. (No mapfile: macOS has bash 3.)
	COMPREPLY=($(compgen -W "$(__@FN@_candidates "${COMP_WORDS[@]:1:COMP_CWORD}")" -- "$cur"))
}
complete -F _@FN@ @CMD@
`

const zshScript = `#compdef @CMD@
# zsh completion for @CMD@, written by "@CMD@ completion zsh".
# Load it, after compinit, with: source <(@CMD@ completion zsh)
` + shTree + `
_@FN@() {
	local -a candidates
	candidates=(${=$(__@FN@_candidates "${(@)words[2,CURRENT]}")})
	compadd -- "${candidates[@]}"
}
compdef _@FN@ @CMD@
`

const fishScript = `# fish completion for @CMD@, written by "@CMD@ completion fish".
# Load it with: @CMD@ completion fish | source
# The command tree: a line per command path, "PATH|WORDS|FLAGS|VALUED":
# what may follow the path, its flags, and the flags that take a value.
set -g __@FN@_tree @TREE@

# __@FN@_entry PATH FIELD prints field FIELD (1 words, 2 flags, 3 valued
# flags) of PATH's line; it fails when PATH is no command.
function __@FN@_entry --argument-names at field
	for line in $__@FN@_tree
		set -l f (string split '|' -- $line)
		if test "$f[1]" = "$at"
			string split --no-empty ' ' -- $f[(math $field + 1)]
			return 0
		end
	end
	return 1
end

# __@FN@_candidates prints what may replace the word under the cursor,
# given the words before it, unfiltered.
function __@FN@_candidates
	set -l words (commandline -opc)
	set -e words[1]
	set -l at ''
	set -l value ''
	for w in $words
		if test -n "$value"
			set value ''
			continue
		end
		switch $w
			case '-*=*'
			case '-*'
				set -l n (string replace -r -- '^--?' '' $w)
				if contains -- $n (__@FN@_entry "$at" 3)
					set value (string trim -- "$at -$n")
				end
			case '*'
				set -l next (string trim -- "$at $w")
				if __@FN@_entry "$next" 1 >/dev/null
					set at $next
				end
		end
	end
	if test -n "$value"
		__@FN@_entry "$value" 1
	else if string match -q -- '-*' (commandline -ct)
		__@FN@_entry "$at" 2
	else
		__@FN@_entry "$at" 1
	end
end

complete -c @CMD@ -f -a '(__@FN@_candidates)'
`
