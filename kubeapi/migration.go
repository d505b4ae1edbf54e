// Package kubeapi is crimux's API through Kubernetes objects: the pod
// annotations by which crimux's node agents and crimux-controller hand a
// live migration between two nodes, the patch that writes them, and the
// VMMigration resource (vmmigration.go). It is a contract, with no logic
// of either side: all import it, none the others.
package kubeapi

import (
	"encoding/json"
	"fmt"
)

// Live migration through the API server (a VMMigration): the two nodes'
// agents never talk to each other and may each write only their own
// node's pods (crimux-node-agent-policy.yaml), so crimux-controller
// carries each agent's answer to the other pod. S is the source pod, T
// the target pod (same namespace, made by the controller from S's spec,
// bound to the target node or left to the scheduler, with
// crimux.io/migrate-from: <namespace>/<S>).
//
//  1. controller  S: migrate-to = T
//  2. S's agent   S: migration-source (GetMigrationSource)
//  3. controller  T: migration-source (copied)
//  4. T's agent   T: migration-target (PrepareMigration, once T's VM
//     container runs, waiting) or migration-result Failed
//  5. controller  S: migration-target (copied)
//  6. S's agent   S: migration-progress while Migrate streams, then
//     migration-result
//  7. controller  T: migration-result (copied)
//  8. T's agent   T: migration-finish (FinishMigration)
//  9. controller  deletes S once the finish says Succeeded; deletes T
//     on any failure (the VM runs on in S, unchanged)
//
// Every value names what it answers (the target pod, the source pod, the
// token), so an answer left from an earlier attempt is never taken for
// this one's.
const (
	// AnnotationMigrateTo, on S (set by the controller): the name of T, in
	// S's namespace.
	AnnotationMigrateTo = "crimux.io/migrate-to"
	// AnnotationMigrateFrom, on T: <namespace>/<S>. It is also what makes
	// crimux create T's VM waiting for incoming state
	// (the VM runtime reads it too).
	AnnotationMigrateFrom = "crimux.io/migrate-from"

	AnnotationMigrationSource   = "crimux.io/migration-source"   // MigrationSource
	AnnotationMigrationTarget   = "crimux.io/migration-target"   // MigrationTarget
	AnnotationMigrationProgress = "crimux.io/migration-progress" // MigrationProgress
	AnnotationMigrationResult   = "crimux.io/migration-result"   // MigrationResult
	AnnotationMigrationFinish   = "crimux.io/migration-finish"   // MigrationFinish
)

// MigrationAnnotations are the agents' migration results: the keys the
// node agent's admission policy lets it write, besides the others.
var MigrationAnnotations = []string{
	AnnotationMigrationSource, AnnotationMigrationTarget, AnnotationMigrationProgress,
	AnnotationMigrationResult, AnnotationMigrationFinish,
}

// Phases of MigrationResult and MigrationFinish.
const (
	MigrationSucceeded = "Succeeded"
	MigrationFailed    = "Failed"
)

// MigrationSource is S's VM as T needs it (vmv1.MigrationSource), and
// which target pod it was asked for.
type MigrationSource struct {
	Target      string `json:"target"` // T's name: the migrate-to it answers
	DomainXML   string `json:"domainXML"`
	GuestMAC    string `json:"guestMAC,omitempty"`
	ImageDigest string `json:"imageDigest"`
	Seal        *Seal  `json:"seal,omitempty"`
}

// Seal is the signature of the node that made a MigrationSource or a
// MigrationTarget (vmv1.Seal): the node acting on one refuses it unless
// a node of the cluster made it, unchanged, for a pod of the namespace.
// Whoever relays a description copies its seal with it.
type Seal struct {
	Certificates     [][]byte `json:"certificates"` // DER, leaf first
	Signature        []byte   `json:"signature"`
	SignedAtUnixNano int64    `json:"signedAtUnixNano"`
}

// MigrationTarget is where S's VM goes (vmv1.MigrationTarget), and for
// which source pod T was prepared.
type MigrationTarget struct {
	Source     string   `json:"source"` // <namespace>/<S>
	LibvirtURI string   `json:"libvirtURI"`
	Address    string   `json:"address"`
	Token      string   `json:"token"`
	DomainXML  string   `json:"domainXML"`
	DomainName string   `json:"domainName"`
	Disks      []string `json:"disks,omitempty"`
	Seal       *Seal    `json:"seal,omitempty"`
}

// MigrationProgress is the last progress Migrate streamed, as S's agent
// wrote it (at most every progressEvery).
type MigrationProgress struct {
	Token          string `json:"token"`
	ElapsedMS      int64  `json:"elapsedMs"`
	TotalBytes     uint64 `json:"totalBytes"`
	ProcessedBytes uint64 `json:"processedBytes"`
	RemainingBytes uint64 `json:"remainingBytes"`
	DirtyRateBytes uint64 `json:"dirtyRateBytes"`
	Iteration      uint64 `json:"iteration"`
}

// MigrationResult is how Migrate ended (on S), or T's refusal to prepare
// (on T, Token empty); the controller copies S's to T.
type MigrationResult struct {
	Token   string `json:"token,omitempty"`
	Phase   string `json:"phase"` // MigrationSucceeded or MigrationFailed
	Message string `json:"message,omitempty"`
}

// MigrationFinish is T's FinishMigration: the VM arrived (Succeeded) or
// not (Failed, Message why).
type MigrationFinish struct {
	Token      string   `json:"token"`
	Phase      string   `json:"phase"`
	DowntimeMS int64    `json:"downtimeMs,omitempty"`
	Addresses  []string `json:"addresses,omitempty"`
	Note       string   `json:"note,omitempty"`
	Message    string   `json:"message,omitempty"`
}

// EncodeAnnotation is v as an annotation value.
func EncodeAnnotation(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// DecodeAnnotation reads annotations[key] into v; ok is false when the
// key is absent.
func DecodeAnnotation(annotations map[string]string, key string, v any) (ok bool, err error) {
	s, ok := annotations[key]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return true, fmt.Errorf("annotations[%s]: %w", key, err)
	}
	return true, nil
}
