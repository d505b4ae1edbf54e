// Package cidata owns a VM's cloud-init NoCloud volume on the node: its
// files made from the pod's record (FilesFor), its name in the VM's
// directory, its size, and its writer.
package cidata

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/crimux/crimux/converter/cloudinit"
)

// File is the VM's cloud-init NoCloud volume, in its directory.
const File = "cidata.iso"

// Writer writes a VM's cloud-init volume into its directory and
// returns the volume's path.
type Writer interface {
	WriteCIData(dir string, files cloudinit.Files) (string, error)
}

// ISO is the Writer of a node: an ISO 9660 volume labelled
// cidata with Joliet names, as cloud-init's NoCloud looks for, written
// by crimux itself (internal/iso9660: no external tool, microseconds).
type ISO struct{}

// WriteCIData writes dir/cidata.iso, root's alone until libvirt hands it
// to qemu's user at start.
func (ISO) WriteCIData(dir string, files cloudinit.Files) (string, error) {
	var buf bytes.Buffer
	if err := files.WriteISO(&buf, time.Now()); err != nil {
		return "", fmt.Errorf("cidata: %w", err)
	}
	p := filepath.Join(dir, File)
	err := os.WriteFile(p, buf.Bytes(), 0o600)
	if err == nil && buf.Len() < Size {
		err = os.Truncate(p, Size)
	}
	if err != nil {
		_ = os.Remove(p)
		return "", err
	}
	return p, nil
}

// Size is every cloud-init volume's size (zeros after the ISO, a
// hole in the file): a clone's guest keeps the size its
// template's volume had, and reads the pod's volume with it. The ISO is
// at most MaxUserData and a few small files.
const Size = 1 << 20
