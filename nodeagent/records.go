package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crimux/crimux/internal/durable"
)

// Phases of a request value in a record:
//
//	(new value) --record written--> started --VM API answered--> done | failed
//	started --crimux restarted--> done (noted: outcome unknown)
type phase string

const (
	phaseStarted phase = "started"
	phaseDone    phase = "done"
	phaseFailed  phase = "failed"
)

// record is what the agent remembers of one pod across restarts: per
// request kind (reboot, snapshot, restore, snapshot-delete), the last
// value it took up; on a migration source, under "migrate"
// (migrateKind), the token of its last Migrate, started before the call.
type record struct {
	UID       types.UID               `json:"uid"`
	Namespace string                  `json:"namespace"`
	Name      string                  `json:"name"`
	Requests  map[string]requestState `json:"requests"`
}

// requestState is one request kind's last value and how far it got.
type requestState struct {
	Value string `json:"value"`
	Phase phase  `json:"phase"`
	// Outcome is what was done ("created", "rebooted (soft)") or, failed,
	// why not.
	Outcome string    `json:"outcome,omitempty"`
	At      time.Time `json:"at"`
}

// recordStore keeps records as one JSON file per pod UID in its dir.
// Only the agent's one worker uses it, so it needs no lock.
type recordStore struct{ dir string }

// uidSyntax guards file names: Kubernetes UIDs are UUIDs.
var uidSyntax = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,127}$`)

func newRecordStore(dir string) (*recordStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("node agent records: %w", err)
	}
	return &recordStore{dir: dir}, nil
}

func (s *recordStore) path(uid types.UID) (string, error) {
	if !uidSyntax.MatchString(string(uid)) {
		return "", fmt.Errorf("pod uid %q: not a UID", uid)
	}
	return filepath.Join(s.dir, string(uid)+".json"), nil
}

// load returns the record of a pod; a pod without one gets an empty one.
func (s *recordStore) load(uid types.UID) (record, error) {
	p, err := s.path(uid)
	if err != nil {
		return record{}, err
	}
	rec := record{UID: uid}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	} else if err != nil {
		return rec, fmt.Errorf("read record: %w", err)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("record %s: %w", p, err)
	}
	return rec, nil
}

// save replaces a pod's record atomically and durably: a temp file,
// fsynced, renamed over the old one, and the directory fsynced, so a
// crash leaves the old record or the new one, never a torn one.
func (s *recordStore) save(rec record) error {
	p, err := s.path(rec.UID)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(p, data, 0o600); err != nil {
		return fmt.Errorf("save record of pod %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	return nil
}

// remove deletes a pod's record; a missing one is fine.
func (s *recordStore) remove(uid types.UID) error {
	p, err := s.path(uid)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove record: %w", err)
	}
	return nil
}

// uids lists the pods that have a record.
func (s *recordStore) uids() ([]types.UID, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	var out []types.UID
	for _, e := range entries {
		if uid, ok := strings.CutSuffix(e.Name(), ".json"); ok && uidSyntax.MatchString(uid) {
			out = append(out, types.UID(uid))
		}
	}
	return out, nil
}
