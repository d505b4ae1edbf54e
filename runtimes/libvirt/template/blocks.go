package template

import (
	"io/fs"
	"syscall"
)

// blocks is what a file takes on disk (sparse files count what they
// hold, not their size).
func blocks(info fs.FileInfo) (uint64, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Blocks) * 512, true
}
