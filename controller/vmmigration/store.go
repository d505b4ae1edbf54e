package vmmigration

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/crimux/crimux/kubeapi"
)

// GVR is the VMMigration resource.
var GVR = schema.GroupVersionResource{Group: kubeapi.VMMigrationGroup, Version: kubeapi.VMMigrationVersion, Resource: kubeapi.VMMigrationResource}

// Store is where the VMMigration objects are: the API server through
// the dynamic client (Dynamic), which the tests drive with its fake.
type Store struct {
	Client dynamic.Interface
}

func (s Store) res(ns string) dynamic.ResourceInterface { return s.Client.Resource(GVR).Namespace(ns) }

// Get is migration ns/name.
func (s Store) Get(ctx context.Context, ns, name string) (*kubeapi.VMMigration, error) {
	u, err := s.res(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(u)
}

// List is every migration of every namespace, and the list's version.
func (s Store) List(ctx context.Context) ([]*kubeapi.VMMigration, string, error) {
	l, err := s.Client.Resource(GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", err
	}
	out := make([]*kubeapi.VMMigration, 0, len(l.Items))
	for i := range l.Items {
		m, err := FromUnstructured(&l.Items[i])
		if err != nil {
			return nil, "", err
		}
		out = append(out, m)
	}
	return out, l.GetResourceVersion(), nil
}

// Watch watches every migration from version on.
func (s Store) Watch(ctx context.Context, version string) (watch.Interface, error) {
	return s.Client.Resource(GVR).Watch(ctx, metav1.ListOptions{ResourceVersion: version, AllowWatchBookmarks: true})
}

// Create creates m.
func (s Store) Create(ctx context.Context, m *kubeapi.VMMigration) (*kubeapi.VMMigration, error) {
	u, err := ToUnstructured(m)
	if err != nil {
		return nil, err
	}
	out, err := s.res(m.Namespace).Create(ctx, u, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// UpdateStatus writes m's status (its resource version a precondition).
func (s Store) UpdateStatus(ctx context.Context, m *kubeapi.VMMigration) (*kubeapi.VMMigration, error) {
	u, err := ToUnstructured(m)
	if err != nil {
		return nil, err
	}
	out, err := s.res(m.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// FromUnstructured is u as a VMMigration.
func FromUnstructured(u *unstructured.Unstructured) (*kubeapi.VMMigration, error) {
	var m kubeapi.VMMigration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m); err != nil {
		return nil, fmt.Errorf("VMMigration %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &m, nil
}

// ToUnstructured is m as the dynamic client sends it.
func ToUnstructured(m *kubeapi.VMMigration) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(kubeapi.VMMigrationGroup + "/" + kubeapi.VMMigrationVersion)
	u.SetKind(kubeapi.VMMigrationKind)
	return u, nil
}
