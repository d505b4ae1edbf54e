package cloudinit

import (
	"strings"
	"unicode"
)

// resolvConfPath is the guest's resolver file.
const resolvConfPath = "/etc/resolv.conf"

// resolverScript writes $1 as the guest's /etc/resolv.conf, replacing
// whatever is there: a file, or the symlink systemd-resolved or
// resolvconf keeps (rename replaces the link, not its target, which its
// owner would rewrite). The text is an argument, never shell text.
const resolverScript = `printf '%s' "$1" >"$2.crimux" && chmod 0644 "$2.crimux" && mv -f "$2.crimux" "$2"`

// resolverCmds is the bootcmd that gives the guest the pod's resolver
// options (kubelet's ndots:5 for a ClusterFirst pod): network-config has
// name servers and search domains but no options, and the managers that
// render it (netplan with systemd-networkd and -resolved, ifupdown,
// NetworkManager) have none to pass on, so the guest gets the pod's whole
// resolv.conf, as kubelet writes it for a container, on every boot (after
// the network is up: bootcmd runs in cloud-init's network stage). Without
// options, or without name servers (a resolv.conf without any would send
// every query to the guest itself), nothing is written and the guest's
// own manager keeps the file.
func resolverCmds(n *Network) []any {
	if n == nil || len(words(n.Options)) == 0 || len(words(n.DNS)) == 0 {
		return nil
	}
	return []any{[]any{"sh", "-c", resolverScript, "crimux-resolv", resolvConf(*n), resolvConfPath}}
}

// resolvConf is the pod's resolver file in kubelet's layout.
func resolvConf(n Network) string {
	var b strings.Builder
	b.WriteString("# The pod's DNS config (servers, searches, options), written by crimux's cloud-init vendor-data at every boot.\n")
	for _, s := range words(n.DNS) {
		b.WriteString("nameserver " + s + "\n")
	}
	if search := words(n.Search); len(search) > 0 {
		b.WriteString("search " + strings.Join(search, " ") + "\n")
	}
	b.WriteString("options " + strings.Join(words(n.Options), " ") + "\n")
	return b.String()
}

// words drops what cannot be one word of resolv.conf (white space or a
// control character in it would start another word, or another line).
func words(list []string) []string {
	var out []string
	for _, w := range list {
		if w != "" && strings.IndexFunc(w, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) < 0 {
			out = append(out, w)
		}
	}
	return out
}
