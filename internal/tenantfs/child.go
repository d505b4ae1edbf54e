package tenantfs

import (
	"os"
	"strconv"
)

// childFD0 is the descriptor a child process gets the first of
// exec.Cmd's ExtraFiles as (after stdin, stdout and stderr).
const childFD0 = 3

// ChildFiles hands files to a child process: the slice to set as the
// exec.Cmd's ExtraFiles (all of them: the paths count on ExtraFiles[i]
// being the child's descriptor 3+i), and for each file the path the
// child opens it at, /dev/fd/N. Opening /dev/fd/N (/proc/self/fd/N)
// reaches the inode the descriptor holds, never a name in the tenant's
// directory: a program that only takes file names (qemu-img) is given
// the file the parent checked, not a path the tenant can change.
func ChildFiles(files ...*os.File) (extra []*os.File, paths []string) {
	extra = append([]*os.File(nil), files...)
	paths = make([]string, len(files))
	for i := range files {
		paths[i] = "/dev/fd/" + strconv.Itoa(childFD0+i)
	}
	return extra, paths
}
