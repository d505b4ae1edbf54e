package core

import "testing"

// TestStarts: a grant is open only while its start is in flight, and is
// used once.
func TestStarts(t *testing.T) {
	var s Starts
	if s.Take("crimux-a") {
		t.Fatal("a grant without a start")
	}
	done := s.Arm("crimux-a")
	if s.Take("crimux-b") {
		t.Fatal("a grant for another domain")
	}
	if !s.Take("crimux-a") {
		t.Fatal("no grant during the start")
	}
	if s.Take("crimux-a") {
		t.Fatal("a grant used twice")
	}
	done()
	done2 := s.Arm("crimux-a")
	done3 := s.Arm("crimux-a")
	if !s.Take("crimux-a") || !s.Take("crimux-a") || s.Take("crimux-a") {
		t.Fatal("two starts in flight give exactly two grants")
	}
	done2()
	done3()
	if s.Take("crimux-a") || len(s.grants) != 0 {
		t.Fatalf("grants left after the starts: %v", s.grants)
	}
}
