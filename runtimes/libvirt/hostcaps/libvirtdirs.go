package hostcaps

import (
	"errors"
	"os"
)

// LibvirtDirs are the directories of libvirt's qemu driver that lead to
// what it makes for each domain and gives that domain's qemu (its master
// key and home in domain-N-<name>/, its agent channel's socket in
// channel/target/domain-N-<name>/). libvirt makes them libvirt-qemu's,
// 0750: only its one qemu user can reach through them. A qemu of its own
// identity must pass through (x), never list (r): each domain's own
// directory below stays its identity's, 0750, with a group of its own.
var LibvirtDirs = []string{
	"/var/lib/libvirt/qemu",
	"/var/lib/libvirt/qemu/channel",
	"/var/lib/libvirt/qemu/channel/target",
}

// OpenLibvirtDirs lets every identity traverse dirs (LibvirtDirs) (adds o+x where
// missing); a directory that does not exist is libvirt's to make.
func OpenLibvirtDirs(dirs []string) error {
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 != 0 {
			continue
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
			return err
		}
	}
	return nil
}
