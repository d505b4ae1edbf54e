package vm

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/crimux/crimux/internal/errdefs"
)

// The pod annotations Kubernetes shapes a pod's traffic with, read as
// containerd reads them for a container pod.
const (
	AnnotationIngressBandwidth = "kubernetes.io/ingress-bandwidth"
	AnnotationEgressBandwidth  = "kubernetes.io/egress-bandwidth"
)

// Kubernetes' bounds on a bandwidth annotation (kubelet's and containerd's
// validateBandwidthIsReasonable), in bits per second.
var (
	minBandwidth = resource.MustParse("1k")
	maxBandwidth = resource.MustParse("1P")
)

// Bandwidth is a pod's traffic shaping in bits per second, for CNI's
// bandwidth capability; 0 is no limit that way.
type Bandwidth struct {
	// Ingress limits what reaches the guest, Egress what it sends.
	Ingress, Egress uint64
}

// PodBandwidth reads the bandwidth annotations of a pod. A value that is
// no quantity, or one under 1k or over 1P, is InvalidArgument naming the
// annotation.
func PodBandwidth(annotations map[string]string) (Bandwidth, error) {
	var bw Bandwidth
	var err error
	if bw.Ingress, err = bandwidthOf(annotations, AnnotationIngressBandwidth); err != nil {
		return Bandwidth{}, err
	}
	if bw.Egress, err = bandwidthOf(annotations, AnnotationEgressBandwidth); err != nil {
		return Bandwidth{}, err
	}
	return bw, nil
}

func bandwidthOf(annotations map[string]string, key string) (uint64, error) {
	v, ok := annotations[key]
	if !ok {
		return 0, nil
	}
	field := "config.annotations[" + key + "]"
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, errdefs.Invalid(field, "%q is no quantity (bits per second, e.g. 10M): %v", v, err)
	}
	if q.Cmp(minBandwidth) < 0 || q.Cmp(maxBandwidth) > 0 {
		return 0, errdefs.Invalid(field, "%s is out of range: from 1k to 1P bits per second", q.String())
	}
	return uint64(q.Value()), nil
}
