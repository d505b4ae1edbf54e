package vm

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/crimux/crimux/internal/errdefs"
)

// Annotations crimux reads from a VM pod or container (the container's win).
const (
	AnnotationKernelArgs = "crimux.io/kernel-args"
	// AnnotationStart says how the VM starts: "template" restores it
	// from its image's booted template where its shape allows,
	// "boot" boots it (the default; it overrides RuntimeClass vm-instant).
	AnnotationStart = "crimux.io/start"
)

// The values of AnnotationStart.
const (
	StartTemplate = "template"
	StartBoot     = "boot"
)

// maxKernelArgs is the x86 kernel command line limit.
const maxKernelArgs = 2048

// Options are the VM settings taken from annotations.
type Options struct {
	// KernelArgs replaces the image's kernel arguments when set.
	KernelArgs string
	// Start is AnnotationStart's value ("" when unset).
	Start string
	// MigrateFrom is AnnotationMigrateFrom's value: the pod is the
	// target of a live migration from it.
	MigrateFrom string
}

// ParseAnnotations reads crimux's annotations, pod first, then the
// container's over it. Unknown crimux.io/ keys are left alone (other tools
// may own them).
func ParseAnnotations(pod, container map[string]string) (Options, error) {
	var o Options
	for _, src := range []map[string]string{pod, container} {
		if v, ok := src[AnnotationKernelArgs]; ok {
			args, err := ParseKernelArgs(v)
			if err != nil {
				return o, errdefs.Invalid("annotations["+AnnotationKernelArgs+"]", "%v", err)
			}
			o.KernelArgs = args
		}
		if v, ok := src[AnnotationStart]; ok {
			if v != StartTemplate && v != StartBoot {
				return o, errdefs.Invalid("annotations["+AnnotationStart+"]", "%q is neither %q nor %q", v, StartTemplate, StartBoot)
			}
			o.Start = v
		}
		if v, ok := src[AnnotationMigrateFrom]; ok {
			if v == "" || len(v) > maxMigrateFrom || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r > '~' }) {
				return o, errdefs.Invalid("annotations["+AnnotationMigrateFrom+"]", "%q does not name a pod (namespace/name) or a container", v)
			}
			o.MigrateFrom = v
		}
	}
	return o, nil
}

// kernelArgsError explains why kernel arguments were refused.
type kernelArgsError string

func (e kernelArgsError) Error() string { return string(e) }

// ParseKernelArgs checks a kernel command line: printable ASCII, balanced
// double quotes, at most 2048 bytes. It returns the line with runs of
// white space outside quotes folded to one space.
func ParseKernelArgs(s string) (string, error) {
	if len(s) > maxKernelArgs {
		return "", kernelArgsError("longer than 2048 bytes")
	}
	var b strings.Builder
	quoted, space := false, false
	for i, r := range s {
		switch {
		case r > unicode.MaxASCII || (r < 0x20 && r != '\t') || r == 0x7f:
			return "", kernelArgsError("control or non-ASCII character at byte " + strconv.Itoa(i))
		case r == '"':
			quoted = !quoted
		case !quoted && (r == ' ' || r == '\t'):
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		if r == '\t' {
			r = ' '
		}
		b.WriteRune(r)
	}
	if quoted {
		return "", kernelArgsError("unbalanced double quote")
	}
	return b.String(), nil
}
