package cloudinit

// Mount is a virtio-fs share of the VM (converter/vm.Share) that the guest
// mounts at its container path.
type Mount struct {
	Tag, Path string
	ReadOnly  bool
}

// mountScript mounts $1 (a virtio-fs tag) at $2 with options $3, once:
// cloud-init runs bootcmd on every boot. Arguments, not text: a path is
// never parsed by the shell.
const mountScript = `mkdir -p "$2" && { mountpoint -q "$2" || mount -t virtiofs -o "$3" "$1" "$2"; }`

// mountCmds is the cloud-init bootcmd that mounts the shares.
func mountCmds(mounts []Mount) []any {
	var out []any
	for _, m := range mounts {
		opts := "rw"
		if m.ReadOnly {
			opts = "ro"
		}
		out = append(out, []any{"sh", "-c", mountScript, "crimux-mount", m.Tag, m.Path, opts})
	}
	return out
}
