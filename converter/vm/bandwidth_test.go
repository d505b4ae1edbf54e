package vm

import (
	"errors"
	"strings"
	"testing"

	"github.com/crimux/crimux/internal/errdefs"
)

// TestPodBandwidth: the annotations read as containerd reads them (a
// quantity of bits per second, from 1k to 1P), anything else refused
// naming the annotation.
func TestPodBandwidth(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        Bandwidth
		refused     string // the annotation named; "" accepted
	}{
		{"none", nil, Bandwidth{}, ""},
		{"others only", map[string]string{"crimux.io/kernel-args": "quiet"}, Bandwidth{}, ""},
		{"ingress", map[string]string{AnnotationIngressBandwidth: "10M"}, Bandwidth{Ingress: 10_000_000}, ""},
		{"egress, binary", map[string]string{AnnotationEgressBandwidth: "1Mi"}, Bandwidth{Egress: 1 << 20}, ""},
		{"both, at the bounds", map[string]string{AnnotationIngressBandwidth: "1k", AnnotationEgressBandwidth: "1P"},
			Bandwidth{Ingress: 1000, Egress: 1_000_000_000_000_000}, ""},
		{"no quantity", map[string]string{AnnotationIngressBandwidth: "ten megabits"}, Bandwidth{}, AnnotationIngressBandwidth},
		{"too small", map[string]string{AnnotationEgressBandwidth: "999"}, Bandwidth{}, AnnotationEgressBandwidth},
		{"negative", map[string]string{AnnotationEgressBandwidth: "-1M"}, Bandwidth{}, AnnotationEgressBandwidth},
		{"too large", map[string]string{AnnotationIngressBandwidth: "2P"}, Bandwidth{}, AnnotationIngressBandwidth},
		{"empty", map[string]string{AnnotationIngressBandwidth: ""}, Bandwidth{}, AnnotationIngressBandwidth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodBandwidth(tc.annotations)
			if tc.refused != "" {
				if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "config.annotations["+tc.refused+"]") {
					t.Fatalf("PodBandwidth = %v, want InvalidArgument naming %s", err, tc.refused)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PodBandwidth = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
