// Package statusinfo is the wire format of crimux's part of a verbose CRI
// Status answer: JSON under the key Key of StatusResponse.Info, one entry
// per registered runtime. The CRI server writes it; crimuxctl (`crimuxctl
// runtimes`) and operators' scripts (`crictl info`) read it. It has no
// dependencies, so a client can import it without the server.
package statusinfo

// Key is the StatusResponse.Info key holding the JSON of an Info.
const Key = "crimux"

// Info is the value under Key.
type Info struct {
	Runtimes []Runtime `json:"runtimes"`
}

// Runtime is one registered runtime and its readiness as the verbose
// Status call found it.
type Runtime struct {
	Name     string   `json:"name"`
	Type     string   `json:"type"`
	Handlers []string `json:"handlers"`
	Primary  bool     `json:"primary"`
	Ready    bool     `json:"ready"`
	Reason   string   `json:"reason,omitempty"`
	Message  string   `json:"message,omitempty"`
	// Network is the runtime's own NetworkReady, for a runtime that
	// reports one besides the primary's (the VM runtime: CNI STATUS).
	Network *Condition `json:"network,omitempty"`
}

// Condition is a readiness condition: ready, or why not.
type Condition struct {
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}
