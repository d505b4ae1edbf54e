package store

// ValidID reports whether id is one crimux mints (core.NewID): 32 lowercase
// hex digits. IDs read back from libvirt or disk (a domain's metadata, a
// directory name) are checked with it before they name a file, a lock or
// a record: libvirt's metadata is qemu's and the host's to write.
func ValidID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
