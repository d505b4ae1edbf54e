package store

import (
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Writes. Each bbolt transaction that writes ends with an fdatasync
// (≈ 2 ms here) and holds the database's one writer lock until then, so
// concurrent writers queue: a burst of 50 VM pods, each writing its
// records a few times while it is made, spent 37 s of goroutine time
// waiting for that lock (a runtime trace of the bench's burst), and every
// pod reached StartContainer ≈ 1.4 s after the direct path's VMs
// (docs/benchmarks.md). A write with others in flight therefore joins
// bbolt's batch (DB.Batch: the writes that arrive within batchDelay are
// committed in one transaction, one fdatasync); a lone write is committed
// at once, as before, without waiting for company.

// batchDelay is how long a batch waits for more writes: short, since a
// write only batches when others are already in flight.
const batchDelay = time.Millisecond

// writer commits writes to db, batching those that run concurrently, and
// counts them (generation).
type writer struct {
	db       *bolt.DB
	inFlight atomic.Int32
	gen      atomic.Uint64
}

func newWriter(db *bolt.DB) *writer {
	db.MaxBatchDelay = batchDelay
	return &writer{db: db}
}

// update runs fn in a writable transaction and commits it. fn may run
// more than once (a batch whose transaction fails is retried): it must
// only write, the same bytes each time.
//
// The generation moves on once the write is committed (or failed), before
// update returns: a reader that sees the generation of before may have
// read the store of before, never the other way round.
func (w *writer) update(fn func(*bolt.Tx) error) error {
	n := w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	defer w.gen.Add(1)
	if n == 1 {
		return w.db.Update(fn)
	}
	return w.db.Batch(fn)
}
