package agent

import "fmt"

// After a hot plug the guest kernel has the new vCPUs and memory blocks
// but, without a udev rule of its own, leaves them offline (Debian's
// cloud kernel: no CONFIG_MEMORY_HOTPLUG_DEFAULT_ONLINE). The agent can
// bring them online (guest-set-vcpus, guest-set-memory-blocks).

type vcpu struct {
	LogicalID  int64 `json:"logical-id"`
	Online     bool  `json:"online"`
	CanOffline bool  `json:"can-offline,omitempty"`
}

type vcpusReply struct {
	Return []vcpu `json:"return"`
}

type setVCPUsArgs struct {
	VCPUs []vcpu `json:"vcpus"`
}

type countReply struct {
	Return int `json:"return"`
}

// SetOnlineVCPUs brings the guest's logical CPUs 0..n-1 online and takes
// the others offline (before they are unplugged, so the unplug is quick),
// and returns how many are online once it is done.
func SetOnlineVCPUs(send Send, n int) (int, error) {
	var got vcpusReply
	if err := call(send, request[struct{}]{Execute: "guest-get-vcpus"}, &got); err != nil {
		return 0, fmt.Errorf("guest-get-vcpus: %w", err)
	}
	online, change := 0, []vcpu{}
	for _, c := range got.Return {
		want := c.LogicalID < int64(n)
		if !want && !c.CanOffline {
			want = true // the guest cannot take it offline (CPU 0)
		}
		if want {
			online++
		}
		if c.Online != want {
			change = append(change, vcpu{LogicalID: c.LogicalID, Online: want})
		}
	}
	if len(change) == 0 {
		return online, nil
	}
	var done countReply
	if err := call(send, request[setVCPUsArgs]{Execute: "guest-set-vcpus", Arguments: setVCPUsArgs{VCPUs: change}}, &done); err != nil {
		return 0, fmt.Errorf("guest-set-vcpus: %w", err)
	}
	if done.Return != len(change) {
		return 0, fmt.Errorf("guest-set-vcpus changed %d of the %d vCPUs asked", done.Return, len(change))
	}
	return online, nil
}

type memoryBlock struct {
	PhysIndex  uint64 `json:"phys-index"`
	Online     bool   `json:"online"`
	CanOffline bool   `json:"can-offline,omitempty"`
}

type blocksReply struct {
	Return []memoryBlock `json:"return"`
}

type setBlocksArgs struct {
	Blocks []memoryBlock `json:"mem-blks"`
}

type blockResult struct {
	PhysIndex uint64 `json:"phys-index"`
	Response  string `json:"response"`
}

type setBlocksReply struct {
	Return []blockResult `json:"return"`
}

// OnlineMemory brings every offline memory block of the guest online and
// returns how many it onlined.
func OnlineMemory(send Send) (int, error) {
	var got blocksReply
	if err := call(send, request[struct{}]{Execute: "guest-get-memory-blocks"}, &got); err != nil {
		return 0, fmt.Errorf("guest-get-memory-blocks: %w", err)
	}
	var offline []memoryBlock
	for _, b := range got.Return {
		if !b.Online {
			offline = append(offline, memoryBlock{PhysIndex: b.PhysIndex, Online: true})
		}
	}
	if len(offline) == 0 {
		return 0, nil
	}
	var done setBlocksReply
	if err := call(send, request[setBlocksArgs]{Execute: "guest-set-memory-blocks", Arguments: setBlocksArgs{Blocks: offline}}, &done); err != nil {
		return 0, fmt.Errorf("guest-set-memory-blocks: %w", err)
	}
	n := 0
	for _, r := range done.Return {
		if r.Response == "success" {
			n++
		}
	}
	if n != len(offline) {
		return n, fmt.Errorf("the guest onlined %d of its %d offline memory blocks", n, len(offline))
	}
	return n, nil
}
