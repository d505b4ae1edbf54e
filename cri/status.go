package cri

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crimux/crimux/cri/statusinfo"
	"github.com/crimux/crimux/registry"
)

// statusTimeout bounds how long Status waits for a non-primary runtime: a
// hung VM runtime must not make the node look down.
const statusTimeout = 3 * time.Second

// Status reports the primary runtime's RuntimeReady and NetworkReady (the
// node's readiness) and adds one condition per other runtime, named
// "<Name>RuntimeReady", so a node whose VM runtime is down stays Ready for
// containers and says why VM pods fail; a runtime that reports its own
// NetworkReady (the VM runtime: its network's CNI STATUS) gets
// "<Name>NetworkReady" too.
func (s *Server) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	reg := s.reg.Load()
	runtimes := reg.Runtimes()
	answers := make([]statusAnswer, len(runtimes))
	var wg sync.WaitGroup
	for i, rt := range runtimes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx := ctx
			if !rt.Primary {
				var cancel context.CancelFunc
				cctx, cancel = context.WithTimeout(ctx, statusTimeout)
				defer cancel()
			}
			resp, err := runtimeStatus(cctx, rt, req.GetVerbose())
			answers[i] = statusAnswer{rt: rt, resp: resp, err: err}
		}()
	}
	wg.Wait()
	return mergeStatus(answers, req.GetVerbose()), nil
}

type statusAnswer struct {
	rt   *registry.Runtime
	resp *runtimeapi.StatusResponse
	err  error
}

func mergeStatus(answers []statusAnswer, verbose bool) *runtimeapi.StatusResponse {
	out := &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{}}
	var info statusinfo.Info
	for _, a := range answers {
		ready, reason, msg := conditionOf(a, runtimeapi.RuntimeReady)
		rinfo := statusinfo.Runtime{Name: a.rt.Name, Type: a.rt.Type, Handlers: a.rt.Handlers, Primary: a.rt.Primary, Ready: ready, Reason: reason, Message: msg}
		netCond := reportedCondition(a, runtimeapi.NetworkReady)
		if netCond != nil {
			rinfo.Network = &statusinfo.Condition{Ready: netCond.Status, Reason: netCond.Reason, Message: netCond.Message}
		}
		info.Runtimes = append(info.Runtimes, rinfo)
		if a.rt.Primary {
			out.Status.Conditions = append(out.Status.Conditions, primaryConditions(a)...)
			out.Features = a.resp.GetFeatures()
			out.Info = a.resp.GetInfo()
			out.RuntimeHandlers = append(out.RuntimeHandlers, handlersOf(a)...)
			continue
		}
		out.Status.Conditions = append(out.Status.Conditions, &runtimeapi.RuntimeCondition{
			Type: conditionType(a.rt.Name), Status: ready, Reason: reason, Message: msg,
		})
		if netCond != nil {
			out.Status.Conditions = append(out.Status.Conditions, &runtimeapi.RuntimeCondition{
				Type: networkConditionType(a.rt.Name), Status: netCond.Status, Reason: netCond.Reason, Message: netCond.Message,
			})
		}
		out.RuntimeHandlers = append(out.RuntimeHandlers, handlersOf(a)...)
	}
	if verbose {
		if out.Info == nil {
			out.Info = map[string]string{}
		}
		b, _ := json.Marshal(info)
		out.Info[statusinfo.Key] = string(b)
	}
	return out
}

// primaryConditions are the primary's own RuntimeReady and NetworkReady, or
// both false with the reason when it cannot be reached.
func primaryConditions(a statusAnswer) []*runtimeapi.RuntimeCondition {
	if a.err != nil {
		msg := "runtime " + a.rt.Name + " is unavailable: " + a.err.Error()
		return []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Reason: "PrimaryRuntimeUnavailable", Message: msg},
			{Type: runtimeapi.NetworkReady, Reason: "PrimaryRuntimeUnavailable", Message: msg},
		}
	}
	return a.resp.Status.Conditions
}

// conditionOf reads one condition of a runtime's answer.
func conditionOf(a statusAnswer, typ string) (bool, string, string) {
	if a.err != nil {
		return false, "RuntimeUnavailable", a.err.Error()
	}
	for _, c := range a.resp.Status.Conditions {
		if c.Type == typ {
			return c.Status, c.Reason, c.Message
		}
	}
	return false, "ConditionMissing", "runtime reported no " + typ + " condition"
}

// reportedCondition is a condition of a runtime's answer; nil when it
// did not answer or reported none of that type.
func reportedCondition(a statusAnswer, typ string) *runtimeapi.RuntimeCondition {
	if a.err != nil {
		return nil
	}
	for _, c := range a.resp.GetStatus().GetConditions() {
		if c.Type == typ {
			return c
		}
	}
	return nil
}

// handlersOf lists the handlers crimux routes to a runtime, with the
// features the runtime reports for each (the primary also serves "").
func handlersOf(a statusAnswer) []*runtimeapi.RuntimeHandler {
	reported := map[string]*runtimeapi.RuntimeHandler{}
	for _, h := range a.resp.GetRuntimeHandlers() {
		reported[h.Name] = h
	}
	names := a.rt.Handlers
	if a.rt.Primary {
		names = append([]string{""}, names...)
	}
	out := make([]*runtimeapi.RuntimeHandler, 0, len(names))
	for _, n := range names {
		if h, ok := reported[n]; ok {
			out = append(out, h)
		} else {
			out = append(out, &runtimeapi.RuntimeHandler{Name: n})
		}
	}
	return out
}

// conditionType names a runtime's condition: "vm" → "VMRuntimeReady",
// "kata-vm" → "KataVMRuntimeReady".
func conditionType(name string) string { return conditionPrefix(name) + "RuntimeReady" }

// networkConditionType names a runtime's network condition: "vm" →
// "VMNetworkReady".
func networkConditionType(name string) string { return conditionPrefix(name) + "NetworkReady" }

func conditionPrefix(name string) string {
	var b strings.Builder
	for _, part := range strings.Split(name, "-") {
		if len(part) <= 2 {
			b.WriteString(strings.ToUpper(part))
		} else if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}
