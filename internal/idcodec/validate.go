package idcodec

import "github.com/crimux/crimux/internal/errdefs"

// MaxLen bounds pod and container IDs (containerd's are 64 hex digits,
// crimux's own add a runtime prefix).
const MaxLen = 253

// Validate rejects IDs that no runtime can have minted: empty, too long,
// or with characters outside [A-Za-z0-9._-]. Catching them at the API
// boundary gives the caller InvalidArgument naming the field instead of a
// runtime's NotFound, and keeps path-like input away from runtimes that
// use IDs as file names. The CRI server and the VM API both use it.
func Validate(field, id string) error {
	if id == "" {
		return errdefs.Invalid(field, "must not be empty")
	}
	if len(id) > MaxLen {
		return errdefs.Invalid(field, "is %d bytes long, more than %d", len(id), MaxLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return errdefs.Invalid(field, "%q has a character not allowed in an ID (%q at %d)", id, c, i)
		}
	}
	if id == "." || id == ".." {
		return errdefs.Invalid(field, "%q is not an ID", id)
	}
	return nil
}
