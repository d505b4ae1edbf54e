package placement

// The parsing of qemu's -name argument and the rules of a domain name:
// what both sides use to tell a crimux VM from anything else.

import (
	"fmt"
	"strings"
)

// GuestName returns the domain name carried by qemu's `-name` argument in
// args (qemu's argv without argv[0]), as libvirt writes it:
// `-name guest=<name>,debug-threads=on` (commas in a name doubled). It also
// accepts the legacy `-name <name>` form. ok is false when there is none.
func GuestName(args []string) (name string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		var val string
		switch {
		case a == "-name" || a == "--name":
			if i+1 >= len(args) {
				return "", false
			}
			val = args[i+1]
		case strings.HasPrefix(a, "-name="):
			val = strings.TrimPrefix(a, "-name=")
		case strings.HasPrefix(a, "--name="):
			val = strings.TrimPrefix(a, "--name=")
		default:
			continue
		}
		first := firstOption(val)
		if v, found := strings.CutPrefix(first, "guest="); found {
			first = v
		} else if strings.Contains(first, "=") {
			// Some other key first (qemu allows any order): look for guest=.
			first = ""
			for _, opt := range splitOptions(val) {
				if v, found := strings.CutPrefix(opt, "guest="); found {
					first = v
				}
			}
		}
		return first, first != ""
	}
	return "", false
}

// IsCrimuxDomain tells whether a domain name is one crimux placed.
func IsCrimuxDomain(name string) bool {
	return strings.HasPrefix(name, DomainPrefix) && len(name) > len(DomainPrefix)
}

// firstOption is the first element of a qemu option string.
func firstOption(val string) string {
	opts := splitOptions(val)
	if len(opts) == 0 {
		return ""
	}
	return opts[0]
}

// splitOptions splits qemu's comma-separated options, where ",," is a
// literal comma.
func splitOptions(val string) []string {
	var out []string
	var cur strings.Builder
	for i := 0; i < len(val); i++ {
		if val[i] == ',' {
			if i+1 < len(val) && val[i+1] == ',' {
				cur.WriteByte(',')
				i++
				continue
			}
			out = append(out, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(val[i])
	}
	return append(out, cur.String())
}

// ValidName checks a domain name before it goes on the wire or into a
// lookup: a crimux name, bounded, printable, no path separators.
func ValidName(name string) error {
	if !IsCrimuxDomain(name) {
		return fmt.Errorf("domain name %q does not start with %q", name, DomainPrefix)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("domain name of %d bytes is longer than %d", len(name), MaxNameLen)
	}
	for _, r := range name {
		if r < 0x21 || r == 0x7f || r == '/' {
			return fmt.Errorf("domain name %q holds a space, control character or '/'", name)
		}
	}
	return nil
}
