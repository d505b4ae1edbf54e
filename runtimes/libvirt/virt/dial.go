package virt

import (
	"fmt"
	"log/slog"

	"github.com/crimux/crimux/internal/errdefs"
)

// Dial opens one connection to the libvirtd of uri (as NewConn takes
// it), for a command that runs beside crimux or without it (crimuxctl
// store rebuild): no reconnects, no events. close ends it.
func Dial(uri string) (l Libvirt, close func() error, err error) {
	c, err := NewConn(uri, slog.New(slog.DiscardHandler), nil, nil)
	if err != nil {
		return nil, nil, err
	}
	gl, err := c.connect()
	if err != nil {
		return nil, nil, fmt.Errorf("libvirtd at %s: %v: %w", c.socket, err, errdefs.ErrUnavailable)
	}
	return remote{l: gl, more: c}, func() error { c.pool.drain(); return gl.Disconnect() }, nil
}
