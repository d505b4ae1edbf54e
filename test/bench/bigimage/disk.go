package bigimage

import (
	"bufio"
	"errors"
	"os"
)

// WriteDisk writes the image's disk alone, DiskSize bytes of the same
// files, as a raw file at path (the import figure's source: vmimport.go
// in the bench).
func WriteDisk(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := fill(w, DiskSize); err != nil {
		return err
	}
	return errors.Join(w.Flush(), f.Sync(), f.Close())
}
