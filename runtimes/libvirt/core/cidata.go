package core

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/crimux/crimux/converter/cloudinit"
)

// CIDataFile is the VM's cloud-init NoCloud volume, in its directory.
const CIDataFile = "cidata.iso"

// cidataStaging holds the files while the ISO is made; removed after.
const cidataStaging = "cidata.d"

// CIDataWriter writes a VM's cloud-init volume into its directory and
// returns the volume's path.
type CIDataWriter interface {
	WriteCIData(dir string, files cloudinit.Files) (string, error)
}

// XorrisoCIData is the CIDataWriter of a node: an ISO made by xorriso.
type XorrisoCIData struct{}

// WriteCIData writes files as an ISO 9660 volume labelled cidata (Joliet
// and Rock Ridge names, as cloud-init's NoCloud reads them) at
// dir/cidata.iso with Debian's xorriso, and returns its path. Nothing is
// written outside dir; the staging directory is gone on return.
func (XorrisoCIData) WriteCIData(dir string, files cloudinit.Files) (string, error) {
	staging := filepath.Join(dir, cidataStaging)
	if err := os.Mkdir(staging, 0o700); err != nil {
		return "", err
	}
	defer os.RemoveAll(staging)
	for name, data := range files {
		if filepath.Base(name) != name || name == "." || name == ".." {
			return "", fmt.Errorf("cidata: bad file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(staging, name), data, 0o600); err != nil {
			return "", err
		}
	}
	iso := filepath.Join(dir, CIDataFile)
	args := []string{"-as", "mkisofs", "-quiet", "-volid", "cidata", "-joliet", "-rational-rock", "-output", iso, staging}
	if out, err := exec.Command("xorriso", args...).CombinedOutput(); err != nil {
		_ = os.Remove(iso)
		return "", fmt.Errorf("cidata: xorriso (package xorriso) %v: %s", err, out)
	}
	// Root's alone until libvirt hands it to qemu's user at start.
	return iso, os.Chmod(iso, 0o600)
}
