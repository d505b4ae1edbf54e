package main

import (
	"fmt"
	"log/slog"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// notifier speaks systemd's notify protocol (Type=notify): READY=1 once
// the socket listens, WATCHDOG=1 from the health loop, RELOADING=1 and
// READY=1 around a reload, STOPPING=1 on shutdown, STATUS= for `systemctl
// status`. Outside systemd (no NOTIFY_SOCKET) it does nothing.
type notifier struct {
	log *slog.Logger
}

func (n notifier) send(state string) {
	// unsetEnvironment false: a reload or the watchdog sends again later.
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Warn("sd_notify failed", "state", state, "err", err)
	}
}

// reloading is the RELOADING=1 message; systemd (253+) wants the
// monotonic time with it to tell reloads apart.
func reloading() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/1000)
}
