package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/crimux/crimux/config"
	"github.com/crimux/crimux/internal/version"
	"github.com/crimux/crimux/nodeagent"
	"github.com/crimux/crimux/runtimes/libvirt"
)

// startNodeAgent starts the node agent when [kubernetes] kubeconfig is
// set, on the same VM API server the socket serves, and returns what stops
// it (and waits until it has). It runs after recovery, so it finds the VMs
// crimux already had. An agent that cannot start is logged, not fatal:
// CRI matters more. A config reload does not restart it: the kubernetes
// section is restart-only (restartOnlyChanges).
func (d *daemon) startNodeAgent(ctx context.Context) (stop func()) {
	k := d.cfg.Kubernetes
	if k.Kubeconfig == "" {
		return func() {}
	}
	agent, host, node, err := d.newNodeAgent(k)
	if err != nil {
		d.log.Error("node agent not started", "kubeconfig", k.Kubeconfig, "err", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		agent.Run(ctx)
	}()
	d.guestBoots.agent.Store(agent)
	d.log.Info("node agent started", "node", node, "api_server", host, "kubeconfig", k.Kubeconfig)
	return func() {
		d.guestBoots.agent.Store(nil)
		cancel()
		<-done
	}
}

// newNodeAgent builds the agent from its kubeconfig; it returns the API
// server's address and the node's name too, for the log.
func (d *daemon) newNodeAgent(k config.Kubernetes) (*nodeagent.Agent, string, string, error) {
	node, err := nodeName(k.NodeName)
	if err != nil {
		return nil, "", "", err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	if err != nil {
		return nil, "", "", fmt.Errorf("kubeconfig: %w", err)
	}
	rc.UserAgent = fmt.Sprintf("%s/%s node-agent (%s)", version.Name, version.Version, node)
	// client-go logs through klog (reflector retries, API warnings): into
	// crimux's log instead of klog's own format on stderr.
	klog.SetSlogLogger(d.log)
	agent, err := nodeagent.New(rc, nodeagent.Options{Node: node, StateDir: d.cfg.StateDir, VMs: d.vm, Log: d.log})
	if err != nil {
		return nil, "", "", err
	}
	return agent, rc.Host, node, nil
}

// nodeName is the configured node name, else the host name lower-cased,
// as kubelet derives its own without --hostname-override.
func nodeName(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("node name: kubernetes.node_name is empty and the host name unknown: %w", err)
	}
	host = strings.ToLower(strings.TrimSpace(host))
	if host == "" {
		return "", errors.New("node name: kubernetes.node_name is empty and so is the host name")
	}
	return host, nil
}

// guestBootRelay passes the VM runtime's guest-boot reports (a guest stuck
// in its firmware, or late) to the node agent as events on the pod; with
// no agent running they are in crimux's log, the VM's log and its CRI
// status only.
type guestBootRelay struct {
	agent atomic.Pointer[nodeagent.Agent]
}

func (g *guestBootRelay) report(b libvirt.GuestBoot) {
	if a := g.agent.Load(); a != nil {
		md := b.Pod
		ref := nodeagent.PodRef{Namespace: md.GetNamespace(), Name: md.GetName(), UID: types.UID(md.GetUid())}
		if b.Reason != "" {
			a.PodEvent(ref, corev1.EventTypeNormal, b.Reason, b.Message)
			return
		}
		a.GuestBoot(ref, b.Booted, b.Message)
	}
}
