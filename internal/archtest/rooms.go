package archtest

// The VM runtime's feature rooms: each owns one feature above its core
// (runtimes/libvirt/core), and the CRI face (criservice) and the wiring
// (runtimes/libvirt) call them, the CRI face through interfaces of its
// own.
var vmRooms = []string{"vmops", "gc", "instant", "migrate", "rootdisk", "resize", "vmstats"}

// vmRoomsAllowed are the imports between feature rooms there are, each
// for a reason: a template's room to grow is that of the VMs cloned from
// it (resize.Headroom).
var vmRoomsAllowed = map[string][]string{"instant": {"resize"}}

const vmRuntime = Module + "/runtimes/libvirt/"

// roomRules keep the feature rooms side by side: none imports the CRI
// face, and none another room but those vmRoomsAllowed names.
func roomRules() []Rule {
	var out []Rule
	for _, from := range vmRooms {
		out = append(out, Rule{From: vmRuntime + from + "/...", To: vmRuntime + "criservice/...",
			Why: "the CRI face calls the feature rooms and translates; a room never reaches back into it"})
		for _, to := range vmRooms {
			if to == from || contains(vmRoomsAllowed[from], to) {
				continue
			}
			out = append(out, Rule{From: vmRuntime + from + "/...", To: vmRuntime + to + "/...",
				Why: "the feature rooms stand side by side on core: what two of them share lives in core or a leaf below it"})
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
