package route

import (
	"context"
	"sync"
	"testing"
)

func TestSlot(t *testing.T) {
	ctx, slot := With(context.Background())
	if got := slot.Runtime(); got != All {
		t.Fatalf("nothing recorded: Runtime() = %q, want %q", got, All)
	}
	Record(context.WithValue(ctx, struct{}{}, 1), "vm") // derived contexts carry the slot
	if got := slot.Runtime(); got != "vm" {
		t.Fatalf("Runtime() = %q, want vm", got)
	}
	Record(ctx, None)
	if got := slot.Runtime(); got != None {
		t.Fatalf("a later record: Runtime() = %q, want %q", got, None)
	}
}

func TestRecordWithoutSlot(t *testing.T) {
	Record(context.Background(), "vm") // must not panic
}

func TestConcurrentRecords(t *testing.T) {
	ctx, slot := With(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); Record(ctx, "containerd") }()
	}
	wg.Wait()
	if got := slot.Runtime(); got != "containerd" {
		t.Fatalf("Runtime() = %q, want containerd", got)
	}
}
