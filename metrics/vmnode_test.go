package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/crimux/crimux/vmtypes"
)

// fakeNodeSampler is a VM runtime's vmtypes.NodeSampler.
type fakeNodeSampler struct {
	s   vmtypes.NodeSample
	err error
}

func (f fakeNodeSampler) NodeSample(context.Context) (vmtypes.NodeSample, error) { return f.s, f.err }

// nodeOf is what the daemon hands the metrics: the sample of the VM
// runtime, nil without one.
func nodeOf(s vmtypes.NodeSampler) func(context.Context) (*vmtypes.NodeSample, error) {
	return func(ctx context.Context) (*vmtypes.NodeSample, error) {
		if s == nil {
			return nil, nil
		}
		v, err := s.NodeSample(ctx)
		return &v, err
	}
}

var nodeSeries = []string{"crimux_agent_calls_in_flight", "crimux_agent_calls_waiting", "crimux_agent_calls_cap",
	"crimux_templates", "crimux_template_bytes", "crimux_image_cache_bytes", "crimux_image_cache_entries",
	"crimux_guest_boots_stuck"}

// TestVMNodeCollector: every series with its value and labels.
func TestVMNodeCollector(t *testing.T) {
	m := New(Options{VMNode: nodeOf(fakeNodeSampler{s: vmtypes.NodeSample{
		AgentCallsInFlight: 3, AgentCallsWaiting: 2, AgentCapPerVM: 4, AgentCapPerNode: 8,
		TemplatesOn: true, Templates: vmtypes.TemplateCounts{Making: 1, Ready: 2, Failed: 3}, TemplateBytes: 1 << 30,
		ImageCacheBytes: 5 << 20, ImageCacheEntries: 7, GuestBootsStuck: 1,
	}})})
	wantLines(t, scrape(t, m),
		`crimux_agent_calls_in_flight 3`,
		`crimux_agent_calls_waiting 2`,
		`crimux_agent_calls_cap{scope="vm"} 4`,
		`crimux_agent_calls_cap{scope="node"} 8`,
		`crimux_templates{state="making"} 1`,
		`crimux_templates{state="ready"} 2`,
		`crimux_templates{state="failed"} 3`,
		`crimux_template_bytes 1.073741824e+09`,
		`crimux_image_cache_bytes 5.24288e+06`,
		`crimux_image_cache_entries 7`,
		`crimux_guest_boots_stuck 1`)
}

// TestVMNodeCollectorTemplatesOff: no template series on a node whose
// templates are off (not zeros, which would read as none made yet); the
// others stay, at zero when nothing fills them.
func TestVMNodeCollectorTemplatesOff(t *testing.T) {
	text := scrape(t, New(Options{VMNode: nodeOf(fakeNodeSampler{})}))
	wantLines(t, text, `crimux_agent_calls_in_flight 0`, `crimux_image_cache_entries 0`, `crimux_guest_boots_stuck 0`)
	for _, s := range []string{"crimux_templates{", "crimux_template_bytes "} {
		if strings.Contains(text, s) {
			t.Errorf("%s exported although templates are off:\n%s", s, text)
		}
	}
}

// TestVMNodeCollectorWithoutVMRuntime: no VM runtime configured, or none
// in force now (a reload removed it), exports none of the series.
func TestVMNodeCollectorWithoutVMRuntime(t *testing.T) {
	for name, opts := range map[string]Options{
		"not configured": {Version: "v1"},
		"none in force":  {Version: "v1", VMNode: nodeOf(nil)},
	} {
		text := scrape(t, New(opts))
		wantLines(t, text, `crimux_build_info{version="v1"} 1`)
		for _, s := range nodeSeries {
			if strings.Contains(text, "\n"+s+" ") || strings.Contains(text, "\n"+s+"{") {
				t.Errorf("%s: %s exported without a VM runtime", name, s)
			}
		}
	}
}

// TestVMNodeCollectorFails: a failing VM runtime exports none of its
// node series and leaves every other metric served.
func TestVMNodeCollectorFails(t *testing.T) {
	text := scrape(t, New(Options{Version: "v1", VMNode: nodeOf(fakeNodeSampler{err: errors.New("store closed")})}))
	wantLines(t, text, `crimux_build_info{version="v1"} 1`)
	for _, s := range nodeSeries { // the event counters (vmevents.go) are the daemon's own: served
		if strings.Contains(text, "\n"+s+" ") || strings.Contains(text, "\n"+s+"{") {
			t.Errorf("%s served although the VM runtime failed", s)
		}
	}
}
