package core

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/crimux/crimux/converter/cloudinit"
)

// CIDataFile is the VM's cloud-init NoCloud volume, in its directory.
const CIDataFile = "cidata.iso"

// CIDataWriter writes a VM's cloud-init volume into its directory and
// returns the volume's path.
type CIDataWriter interface {
	WriteCIData(dir string, files cloudinit.Files) (string, error)
}

// ISOCIData is the CIDataWriter of a node: an ISO 9660 volume labelled
// cidata with Joliet names, as cloud-init's NoCloud looks for, written
// by crimux itself (internal/iso9660: no external tool, microseconds).
type ISOCIData struct{}

// WriteCIData writes dir/cidata.iso, root's alone until libvirt hands it
// to qemu's user at start.
func (ISOCIData) WriteCIData(dir string, files cloudinit.Files) (string, error) {
	var buf bytes.Buffer
	if err := files.WriteISO(&buf, time.Now()); err != nil {
		return "", fmt.Errorf("cidata: %w", err)
	}
	p := filepath.Join(dir, CIDataFile)
	err := os.WriteFile(p, buf.Bytes(), 0o600)
	if err == nil && buf.Len() < CIDataSize {
		err = os.Truncate(p, CIDataSize)
	}
	if err != nil {
		_ = os.Remove(p)
		return "", err
	}
	return p, nil
}

// CIDataSize is every cloud-init volume's size (zeros after the ISO, a
// hole in the file): a clone's guest keeps the size its
// template's volume had, and reads the pod's volume with it. The ISO is
// at most MaxUserData and a few small files.
const CIDataSize = 1 << 20
