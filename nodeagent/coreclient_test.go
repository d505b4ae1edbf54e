package nodeagent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// apiRequest is what the fake API server received.
type apiRequest struct {
	method, path, query, contentType, body string
}

// fakeAPIServer answers the agent's four requests as kube-apiserver
// does, and records them.
func fakeAPIServer(t *testing.T) (*coreClient, func() []apiRequest) {
	t.Helper()
	var mu sync.Mutex
	var got []apiRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, apiRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), string(body)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		pod := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "default", UID: "u1", ResourceVersion: "7"}}
		switch {
		case r.URL.Query().Get("watch") == "true":
			ev, _ := json.Marshal(map[string]any{"type": "MODIFIED", "object": pod})
			_, _ = w.Write(append(ev, '\n'))
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
			_ = json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []corev1.Pod{pod}})
		case r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/pods/vm1"):
			pod.ResourceVersion = "8"
			_ = json.NewEncoder(w).Encode(pod)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events"):
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: `pods "gone" not found`})
		}
	}))
	t.Cleanup(srv.Close)
	c, err := newCoreClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c, func() []apiRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]apiRequest(nil), got...)
	}
}

func TestCoreClient(t *testing.T) {
	ctx := context.Background()
	c, requests := fakeAPIServer(t)
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=node-1", ResourceVersion: "0"}

	list, err := c.listPods(ctx, sel)
	if err != nil || len(list.Items) != 1 || list.Items[0].UID != "u1" || list.ResourceVersion != "7" {
		t.Fatalf("listPods = %+v, %v", list, err)
	}
	w, err := c.watchPods(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if pod, ok := ev.Object.(*corev1.Pod); ev.Type != watch.Modified || !ok || pod.UID != "u1" {
			t.Errorf("watch event = %v %#v", ev.Type, ev.Object)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no watch event")
	}
	w.Stop()
	patched, err := c.mergePatchPod(ctx, "default", "vm1", []byte(`{"metadata":{"uid":"u1"}}`))
	if err != nil || patched.ResourceVersion != "8" {
		t.Fatalf("mergePatchPod = %+v, %v", patched, err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "vm1.1", Namespace: "default"}, Reason: ReasonRebooted}
	if err := c.createEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if _, err := c.mergePatchPod(ctx, "default", "gone", []byte(`{}`)); !apierrors.IsNotFound(err) {
		t.Errorf("patch of a missing pod = %v, want the API server's NotFound", err)
	}

	got := requests()
	if len(got) != 5 {
		t.Fatalf("requests = %+v", got)
	}
	for i, want := range []apiRequest{
		{method: "GET", path: "/api/v1/pods", query: "fieldSelector=spec.nodeName%3Dnode-1&resourceVersion=0"},
		{method: "GET", path: "/api/v1/pods", query: "fieldSelector=spec.nodeName%3Dnode-1&resourceVersion=0&watch=true"},
		{method: "PATCH", path: "/api/v1/namespaces/default/pods/vm1", contentType: "application/merge-patch+json", body: `{"metadata":{"uid":"u1"}}`},
		{method: "POST", path: "/api/v1/namespaces/default/events", contentType: "application/json"},
	} {
		g := got[i]
		if g.method != want.method || g.path != want.path || (want.query != "" && g.query != want.query) ||
			(want.contentType != "" && g.contentType != want.contentType) || (want.body != "" && g.body != want.body) {
			t.Errorf("request %d = %+v, want %+v", i, g, want)
		}
	}
	var sent corev1.Event
	if err := json.Unmarshal([]byte(got[3].body), &sent); err != nil || sent.Reason != ReasonRebooted || sent.Kind != "Event" || sent.APIVersion != "v1" {
		t.Errorf("event body %s (%v): want a v1 Event with its reason", got[3].body, err)
	}
}
