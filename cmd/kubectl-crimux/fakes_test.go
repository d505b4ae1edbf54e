package main

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/crimux/crimux/kubeapi"
)

const testNS = "default"

func vmPod(name, node string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	vm := "vm"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS, UID: types.UID("uid-" + name), ResourceVersion: "7",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"crimux.io/vm-cpus": "2", kubeapi.AnnotationPowerState: "Running"},
		},
		Spec: corev1.PodSpec{
			NodeName: node, RuntimeClassName: &vm,
			Containers: []corev1.Container{{Name: "vm", Image: "registry.example/debian:12"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.88.0.4",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vm", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
		},
	}
	for _, f := range mutate {
		f(p)
	}
	return p
}

// getPod is pod testNS/name as the fake cluster has it.
func getPod(t *testing.T, c kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(testNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a bytes.Buffer safe to read while written.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}
