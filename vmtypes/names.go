package vmtypes

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/crimux/crimux/internal/errdefs"
)

// MaxSnapshotNameLen bounds a snapshot name (bytes). Names reach libvirt's
// snapshot metadata file names and qemu's snapshot table, so they are kept
// short and plain.
const MaxSnapshotNameLen = 64

// ValidateSnapshotName accepts 1 to MaxSnapshotNameLen characters of
// [A-Za-z0-9._-] that start with a letter or digit and hold no "..". The
// error is InvalidArgument naming the field and the rule broken.
func ValidateSnapshotName(name string) error {
	field := fmt.Sprintf("snapshot_name %q", shorten(name))
	switch {
	case name == "":
		return errdefs.Invalid("snapshot_name", "must not be empty")
	case len(name) > MaxSnapshotNameLen:
		return errdefs.Invalid(field, "is %d bytes long; at most %d are allowed", len(name), MaxSnapshotNameLen)
	case strings.Contains(name, "/"):
		return errdefs.Invalid(field, `must not contain "/"`)
	case strings.Contains(name, ".."):
		return errdefs.Invalid(field, `must not contain ".."`)
	case strings.ContainsFunc(name, unicode.IsControl) || !utf8.ValidString(name):
		return errdefs.Invalid(field, "must not contain control characters")
	}
	for i, ch := range name {
		if !isNameChar(ch) {
			return errdefs.Invalid(field, "has %q, not allowed: use letters, digits, '.', '_' and '-'", ch)
		}
		if i == 0 && (ch == '.' || ch == '_' || ch == '-') {
			return errdefs.Invalid(field, "must start with a letter or a digit")
		}
	}
	return nil
}

func isNameChar(ch rune) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '_' || ch == '-'
}

// shorten keeps error messages readable when a name is long.
func shorten(s string) string {
	const keep = 40
	if len(s) <= keep {
		return s
	}
	return s[:keep] + "..."
}
