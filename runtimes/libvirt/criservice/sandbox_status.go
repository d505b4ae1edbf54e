package criservice

import (
	"context"
	"encoding/json"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/internal/crifilter"
	"github.com/crimux/crimux/runtimes/libvirt/core"
	"github.com/crimux/crimux/runtimes/libvirt/store"
)

// PodSandboxStatus reports the pod from the store.
func (r *Service) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := r.Store.LiveSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: core.SandboxStatus(sb)}
	if req.GetVerbose() {
		resp.Info = map[string]string{"info": verboseInfo(sb)}
	}
	if sb.ContainerID != "" {
		if c, err := r.StatusOf(ctx, sb.ContainerID); err == nil {
			resp.ContainersStatuses = []*runtimeapi.ContainerStatus{c}
		}
	}
	resp.Timestamp = time.Now().UnixNano()
	return resp, nil
}

// ListPodSandbox lists VM pods from the store: they stay listed, with
// their last known state, while libvirtd is down.
func (r *Service) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	recs, err := r.Store.LiveSandboxes()
	if err != nil {
		return nil, err
	}
	f := req.GetFilter()
	var out []*runtimeapi.PodSandbox
	for _, sb := range recs {
		if item := sandboxItem(sb); crifilter.Sandbox(f, item) {
			out = append(out, item)
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

// verboseInfo is PodSandboxStatus' verbose "info": the VM and its network.
func verboseInfo(sb *store.Sandbox) string {
	info := map[string]any{"runtime": "vm", "containerId": sb.ContainerID}
	if a := sb.Net; a != nil {
		info["network"] = map[string]any{
			"netns": a.NetNS, "ip": a.IP, "prefixLen": a.PrefixLen, "gateway": a.Gateway,
			"additionalIPs": a.AdditionalIPs, "guestMAC": a.GuestMAC, "hostVeth": a.HostVeth, "down": sb.NetDown,
		}
	}
	b, _ := json.Marshal(info)
	return string(b)
}
