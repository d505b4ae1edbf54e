package vmimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// kind is what a path in the merged image filesystem is.
type kind uint8

const (
	kindDir kind = iota
	kindReg
	kindSymlink
	kindOther // devices, fifos and anything else we never copy
)

func (k kind) String() string {
	switch k {
	case kindDir:
		return "directory"
	case kindReg:
		return "regular file"
	case kindSymlink:
		return "symlink"
	default:
		return "device or special file"
	}
}

// maxSymlinkHops is Linux's MAXSYMLINKS.
const maxSymlinkHops = 40

// errNotExist marks a path that is not in the image; callers decide whether
// that is an error.
var errNotExist = errors.New("no such file or directory")

// fileRef says where a regular file's bytes are: the ordinal of its header
// in one layer's tar stream. The second pass finds it by counting again.
type fileRef struct {
	layer, entry int
}

// node is one path of the merged filesystem. layer is the layer that last
// wrote it, which is what whiteouts compare against.
type node struct {
	kind     kind
	layer    int
	children map[string]*node // kindDir
	target   string           // kindSymlink
	size     int64            // kindReg
	src      fileRef          // kindReg
}

func newDir(layer int) *node {
	return &node{kind: kindDir, layer: layer, children: map[string]*node{}}
}

// maxSteps bounds the work of indexing one image (path components walked,
// nodes visited by whiteouts): a few hundred thousand entries take a few
// million; a crafted image (deep symlink chains, repeated opaque markers
// over a large directory) would otherwise take quadratic time.
const maxSteps = 1 << 26

// tree is the merged filesystem of an image's layers: an index of names,
// types and sizes, no contents.
type tree struct {
	root    *node
	entries int // tar headers applied, bounded by maxEntries
	// nameBytes are the bytes of names and link targets read, bounded by
	// maxNameBytes.
	nameBytes int
	steps     int // work done, bounded by budget
	budget    int // maxSteps, less in tests
	// keep, if set, sees each entry once it is applied, its contents
	// still unread in r (earlyCopies).
	keep func(hdr *tar.Header, r io.Reader, ref fileRef) error
}

func (t *tree) tooMuchWork(p string) error {
	return invalid(p, "indexing the image takes more than %d steps", t.budget)
}

func newTree() *tree { return &tree{root: newDir(-1), budget: maxSteps} }

// walk resolves p from the image root, following symlinks in every
// component and, if followLast, in the last one. Absolute symlink targets
// start again at the image root; ".." above the root is an escape and an
// error, never clamped. With mkdir >= 0, missing directories are created as
// written by layer mkdir. It returns the node and its resolved path.
func (t *tree) walk(p string, followLast bool, mkdir int) (*node, string, error) {
	todo := splitPath(p)
	stack := []string{}
	dirs := []*node{t.root}
	hops := 0
	link := "" // the last symlink followed, for messages
	for len(todo) > 0 {
		if t.steps++; t.steps > t.budget {
			return nil, "", t.tooMuchWork(p)
		}
		name := todo[0]
		todo = todo[1:]
		switch name {
		case ".":
			continue
		case "..":
			if len(stack) == 0 {
				if link != "" {
					return nil, "", invalid(p, "symlink %s leaves the image root", link)
				}
				return nil, "", invalid(p, "path climbs above the image root")
			}
			stack = stack[:len(stack)-1]
			dirs = dirs[:len(dirs)-1]
			continue
		}
		cur := dirs[len(dirs)-1]
		child := cur.children[name]
		if child == nil {
			if mkdir < 0 {
				return nil, "", fmt.Errorf("%s: %w", path.Join("/", path.Join(stack...), name), errNotExist)
			}
			child = newDir(mkdir)
			cur.children[name] = child
		}
		if child.kind == kindSymlink && (len(todo) > 0 || followLast) {
			hops++
			if hops > maxSymlinkHops {
				return nil, "", invalid(p, "too many levels of symbolic links (more than %d)", maxSymlinkHops)
			}
			link = fmt.Sprintf("%s -> %q", path.Join("/", path.Join(stack...), name), child.target)
			if child.target == "" {
				return nil, "", invalid(p, "symlink %s is empty", link)
			}
			if strings.HasPrefix(child.target, "/") {
				stack = stack[:0]
				dirs = dirs[:1]
			}
			todo = append(splitPath(child.target), todo...)
			continue
		}
		if len(todo) > 0 && child.kind != kindDir {
			return nil, "", invalid(p, "%s is a %s, not a directory", path.Join("/", path.Join(stack...), name), child.kind)
		}
		stack = append(stack, name)
		dirs = append(dirs, child)
	}
	return dirs[len(dirs)-1], "/" + path.Join(stack...), nil
}

// lookup resolves p, following symlinks all the way.
func (t *tree) lookup(p string) (*node, string, error) { return t.walk(p, true, -1) }

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// pruneLower removes what layers below layer wrote under n, keeping what
// layer itself wrote (a whiteout hides only lower layers' files, whatever
// the order of entries within its own layer). It reports whether n itself
// is now empty and from a lower layer, so its parent should drop it too.
// It stops early once the tree's step budget is spent; the caller checks.
func (t *tree) pruneLower(n *node, layer int) bool {
	for name, c := range n.children {
		if t.steps++; t.steps > t.budget {
			return false
		}
		if t.pruneLower(c, layer) {
			delete(n.children, name)
		}
	}
	return n.layer < layer && len(n.children) == 0
}
