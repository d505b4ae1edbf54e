package vmimage

import (
	"fmt"

	"github.com/crimux/crimux/internal/errdefs"
)

// invalidError is an image rejected by validation. The pure checks fill in
// Path (the file or layer at fault) and Reason; Prepare adds the image
// reference, so every message names both.
type invalidError struct {
	Image  string
	Path   string
	Reason string
}

func (e *invalidError) Error() string {
	switch {
	case e.Image == "" && e.Path == "":
		return e.Reason
	case e.Image == "":
		return e.Path + ": " + e.Reason
	case e.Path == "":
		return fmt.Sprintf("image %q %s", e.Image, e.Reason)
	default:
		return fmt.Sprintf("image %q: %s: %s", e.Image, e.Path, e.Reason)
	}
}

func (e *invalidError) Unwrap() error { return errdefs.ErrInvalidArgument }

func invalid(path, format string, args ...any) error {
	return &invalidError{Path: path, Reason: fmt.Sprintf(format, args...)}
}
