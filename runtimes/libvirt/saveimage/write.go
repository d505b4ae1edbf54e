package saveimage

import (
	"fmt"
	"os"
)

// WriteImage writes a save image at path (mode 0600, not there before):
// the header a clone gets (cloneHeader), then stream as qemu's. libvirt
// writes the real ones; this is the fake libvirtd's (virtfake) and the
// tests'.
func WriteImage(path, xml, cookie string, stream []byte) error {
	head, err := cloneHeader(xml, cookie)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("save image: %w", err)
	}
	_, err = f.Write(append(head, stream...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("save image %s: %w", path, err)
	}
	return nil
}
