package rootvol

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"time"
)

// Snapshot is an internal snapshot a qcow2 root disk holds.
type Snapshot struct {
	Name string
	// VMState: it holds a running VM's memory too.
	VMState bool
	Created time.Time
}

type infoJSON struct {
	Snapshots []struct {
		Name        string `json:"name"`
		VMStateSize int64  `json:"vm-state-size"`
		DateSec     int64  `json:"date-sec"`
		DateNsec    int64  `json:"date-nsec"`
	} `json:"snapshots"`
}

// Snapshots lists the internal snapshots of the qcow2 at path, oldest
// first. The disk must not be in use.
func Snapshots(ctx context.Context, path string) ([]Snapshot, error) {
	out, err := exec.CommandContext(ctx, qemuImg, "info", "--output=json", "-f", "qcow2", path).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	var info infoJSON
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	snaps := make([]Snapshot, 0, len(info.Snapshots))
	for _, s := range info.Snapshots {
		snaps = append(snaps, Snapshot{Name: s.Name, VMState: s.VMStateSize > 0, Created: time.Unix(s.DateSec, s.DateNsec)})
	}
	sort.SliceStable(snaps, func(i, j int) bool { return snaps[i].Created.Before(snaps[j].Created) })
	return snaps, nil
}
