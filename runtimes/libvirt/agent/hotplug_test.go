package agent

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// guestCPUs answers guest-get-vcpus and guest-set-vcpus as
// qemu-guest-agent does, over the online state of each logical CPU.
func guestCPUs(t *testing.T, online []bool) (Send, *[]bool) {
	return func(cmd string, _ time.Duration) (string, error) {
		var req struct {
			Execute   string       `json:"execute"`
			Arguments setVCPUsArgs `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(cmd), &req); err != nil {
			t.Fatalf("bad request %q: %v", cmd, err)
		}
		switch req.Execute {
		case "guest-get-vcpus":
			var out []vcpu
			for i, on := range online {
				out = append(out, vcpu{LogicalID: int64(i), Online: on, CanOffline: i > 0})
			}
			b, _ := json.Marshal(vcpusReply{Return: out})
			return string(b), nil
		case "guest-set-vcpus":
			for _, c := range req.Arguments.VCPUs {
				online[c.LogicalID] = c.Online
			}
			return `{"return":` + itoa(len(req.Arguments.VCPUs)) + `}`, nil
		}
		t.Fatalf("unexpected command %s", req.Execute)
		return "", nil
	}, &online
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestSetOnlineVCPUs(t *testing.T) {
	send, state := guestCPUs(t, []bool{true, false, false}) // 2 hot-plugged, offline
	if n, err := SetOnlineVCPUs(send, 2); err != nil || n != 2 {
		t.Fatalf("SetOnlineVCPUs(2) = %d, %v", n, err)
	}
	if got := *state; !got[0] || !got[1] || got[2] {
		t.Fatalf("online = %v, want CPUs 0 and 1", got)
	}
	if n, err := SetOnlineVCPUs(send, 1); err != nil || n != 1 || (*state)[1] {
		t.Fatalf("SetOnlineVCPUs(1) = %d, %v; online %v", n, err, *state)
	}
	if n, err := SetOnlineVCPUs(send, 0); err != nil || n != 1 || !(*state)[0] {
		t.Fatalf("CPU 0 cannot go offline: %d, %v, %v", n, err, *state)
	}
}

func TestOnlineMemory(t *testing.T) {
	var asked []memoryBlock
	send := func(cmd string, _ time.Duration) (string, error) {
		switch {
		case strings.Contains(cmd, "guest-get-memory-blocks"):
			return `{"return":[{"online":false,"can-offline":true,"phys-index":32},{"online":true,"can-offline":true,"phys-index":3},{"online":false,"can-offline":true,"phys-index":33}]}`, nil
		case strings.Contains(cmd, "guest-set-memory-blocks"):
			var req struct {
				Arguments setBlocksArgs `json:"arguments"`
			}
			_ = json.Unmarshal([]byte(cmd), &req)
			asked = req.Arguments.Blocks
			return `{"return":[{"response":"success","phys-index":32},{"response":"success","phys-index":33}]}`, nil
		}
		return "", nil
	}
	n, err := OnlineMemory(send)
	if err != nil || n != 2 || len(asked) != 2 || asked[0].PhysIndex != 32 || !asked[1].Online {
		t.Fatalf("OnlineMemory = %d, %v; asked %+v", n, err, asked)
	}
}
