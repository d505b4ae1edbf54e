package instant

import (
	"context"
	"errors"
	"sync"
)

// errNobodyAsks ends a making in the background once every pod that asked
// for its template is gone: a tenant who creates and removes pods of ever
// new shapes must not make the node boot template VMs nobody waits for.
var errNobodyAsks = errors.New("no pod asks for this template any more")

// askers are the pods that asked for each template being made in the
// background (Start), and how to cancel each such making.
type askers struct {
	mu     sync.Mutex
	pods   map[string]map[string]bool // template key -> pod sandbox IDs
	cancel map[string]context.CancelCauseFunc
}

// ask records that pod asked for template key.
func (a *askers) ask(key, pod string) {
	if pod == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pods == nil {
		a.pods = map[string]map[string]bool{}
	}
	if a.pods[key] == nil {
		a.pods[key] = map[string]bool{}
	}
	a.pods[key][pod] = true
}

// started records how to cancel the background making of key.
func (a *askers) started(key string, cancel context.CancelCauseFunc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel == nil {
		a.cancel = map[string]context.CancelCauseFunc{}
	}
	a.cancel[key] = cancel
}

// done forgets key's making and askers: it ended.
func (a *askers) done(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.cancel, key)
	delete(a.pods, key)
}

// forget removes pod from every template's askers and cancels each
// background making that no pod asks for any more; it returns their keys.
func (a *askers) forget(pod string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var cancelled []string
	for key, pods := range a.pods {
		if !pods[pod] {
			continue
		}
		delete(pods, pod)
		if len(pods) > 0 {
			continue
		}
		delete(a.pods, key)
		if cancel := a.cancel[key]; cancel != nil {
			cancel(errNobodyAsks)
			cancelled = append(cancelled, key)
		}
	}
	return cancelled
}
