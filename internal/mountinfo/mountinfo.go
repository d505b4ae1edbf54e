// Package mountinfo reads /proc/self/mountinfo: its escaped paths, and
// whether a path is a mount point.
package mountinfo

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// Unescape undoes mountinfo's octal escapes (\040 for a space …).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// IsMountPoint tells whether path is a mount point of this process's
// mount namespace.
func IsMountPoint(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	path = filepath.Clean(path)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && Unescape(fields[4]) == path {
			return true, nil
		}
	}
	return false, sc.Err()
}
