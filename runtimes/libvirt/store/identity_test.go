package store

import "testing"

// TestLastIdentityOutlivesTheStore: the cursor of VM identities is kept
// across a close and an open (a crimux started again).
func TestLastIdentityOutlivesTheStore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.LastIdentity(); ok || err != nil {
		t.Fatalf("a new store: ok %v, %v", ok, err)
	}
	if err := s.SetLastIdentity(500007); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if uid, ok, err := s.LastIdentity(); uid != 500007 || !ok || err != nil {
		t.Fatalf("after a reopen: %d, %v, %v", uid, ok, err)
	}
}
