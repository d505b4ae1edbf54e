package migration

import (
	"fmt"
	"os"

	"github.com/crimux/crimux/runtimes/libvirt/migproxy"
)

// Expect readies this node for container id's VM to arrive: a socket
// directory that only the target qemu's identity (uid, gid) can write
// in, and the token that lets a peer's streams reach it. undo (also run
// by Forget) takes both away, and runs onForget.
func (n *Node) Expect(id string, uid, gid int, onForget func()) (token string, err error) {
	if n == nil {
		return "", errOff
	}
	token = migproxy.NewToken()
	dir := n.Dir(token)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("migration socket dir: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("migration socket dir: %w", err)
	}
	cancel := n.listener.Expect(token, uid, n.sockets(token))
	n.mu.Lock()
	if old := n.incoming[id]; old != nil {
		old()
	}
	n.incoming[id] = func() {
		cancel()
		_ = os.RemoveAll(dir)
		if onForget != nil {
			onForget()
		}
	}
	n.mu.Unlock()
	return token, nil
}

// Forget ends what Expect readied for container id (nothing if none).
func (n *Node) Forget(id string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	undo := n.incoming[id]
	delete(n.incoming, id)
	n.mu.Unlock()
	if undo != nil {
		undo()
	}
}

// Expecting: container id waits for its VM here.
func (n *Node) Expecting(id string) bool {
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.incoming[id] != nil
}
