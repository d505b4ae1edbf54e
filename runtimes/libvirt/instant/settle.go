package instant

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/crimux/crimux/runtimes/libvirt/agent"
	"github.com/crimux/crimux/runtimes/libvirt/virt"
)

// settleScript brings a booted template's guest to rest before its state
// is saved: cloud-init and the boot finished (a clone must not go on with
// the template's first boot), the VM generation ID driver loaded where
// the guest's kernel has one (each clone's new ID then reseeds its RNG;
// Debian 12's cloud kernel has none, CONFIG_VIRT_DRIVERS unset, so crimux
// reseeds each clone itself: identity.go), the page cache dropped (a
// smaller save image, less for each clone to load).
const settleScript = `command -v cloud-init >/dev/null && cloud-init status --wait >/dev/null
systemctl is-system-running --wait >/dev/null 2>&1
modprobe vmgenid 2>/dev/null
if [ -d /sys/bus/acpi/drivers/vmgenid ]; then echo vmgenid; fi
sync
echo 3 >/proc/sys/vm/drop_caches
exit 0
`

// pingEvery is how often a booting template's agent is asked.
const pingEvery = time.Second

// settle waits for the template's guest agent, then runs settleScript;
// vmgenid says whether the guest has a VM generation ID driver.
func settle(ctx context.Context, l virt.Libvirt, dom virt.Domain) (vmgenid bool, err error) {
	send := agent.SendTo(l, dom)
	if err := agent.Wait(ctx, send, pingEvery); err != nil {
		return false, err
	}
	res, err := agent.ExecInput(ctx, send, []string{"/bin/sh", "-s"}, []byte(settleScript))
	if err != nil {
		return false, fmt.Errorf("settle its guest: %w", err)
	}
	if res.ExitCode != 0 {
		return false, fmt.Errorf("settle its guest: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return strings.Contains(string(res.Stdout), "vmgenid"), nil
}
