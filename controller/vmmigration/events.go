package vmmigration

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/crimux/crimux/internal/kubeclient"
	"github.com/crimux/crimux/kubeapi"
)

// eventSink records events about migrations and their pods.
type eventSink struct{ kubeclient.Events }

func (e eventSink) onMigration(m *kubeapi.VMMigration, typ, reason, msg string) {
	e.Record(corev1.ObjectReference{APIVersion: kubeapi.VMMigrationGroup + "/" + kubeapi.VMMigrationVersion, Kind: kubeapi.VMMigrationKind,
		Namespace: m.Namespace, Name: m.Name, UID: m.UID}, typ, reason, msg)
}

func (e eventSink) onPod(p *corev1.Pod, typ, reason, msg string) { e.Pod(p, typ, reason, msg) }
