package store

import (
	"sync"
	"sync/atomic"
)

// copyJob writes (or removes) one record's copy, stamped with the order
// its record's write was committed in.
type copyJob struct {
	stamp  uint64
	path   string
	raw    []byte
	remove bool
	// podDir: the copy is in the pod's directory, made for a write if
	// need be, removed after a removal if nothing else is left in it.
	podDir bool
}

// copyWriter writes the record copies (copies.go) on a goroutine of its
// own. A stamp taken inside each write's transaction (bbolt runs them one
// at a time) orders two writes of one record: only the newest queued job
// of a record is done, and none older than one already taken.
type copyWriter struct {
	root  string // the state dir
	stamp atomic.Uint64

	mu       sync.Mutex
	pending  map[string]copyJob // record key -> its newest job not taken yet
	taken    map[string]uint64  // record key -> stamp of its last job taken
	busy     bool               // jobs taken are being done
	idle     *sync.Cond         // broadcast when nothing is pending or busy
	onErr    func(path string, err error)
	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	stopped  chan struct{}
}

func newCopyWriter(root string) *copyWriter {
	c := &copyWriter{root: root, pending: map[string]copyJob{}, taken: map[string]uint64{},
		onErr: func(string, error) {}, wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	c.idle = sync.NewCond(&c.mu)
	go c.run()
	return c
}

func (c *copyWriter) setOnErr(f func(path string, err error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onErr = f
}

// queue makes j the job of record key, unless a newer one is queued or
// taken already.
func (c *copyWriter) queue(key string, j copyJob) {
	c.mu.Lock()
	if p, ok := c.pending[key]; ok && p.stamp > j.stamp || c.taken[key] > j.stamp {
		c.mu.Unlock()
		return
	}
	c.pending[key] = j
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *copyWriter) run() {
	defer close(c.stopped)
	for {
		select {
		case <-c.wake:
			c.drain()
		case <-c.stop:
			c.drain()
			return
		}
	}
}

// drain does every queued job, until none is left.
func (c *copyWriter) drain() {
	for {
		c.mu.Lock()
		jobs := c.pending
		if len(jobs) == 0 {
			c.busy = false
			c.idle.Broadcast()
			c.mu.Unlock()
			return
		}
		c.pending, c.busy = map[string]copyJob{}, true
		for key, j := range jobs {
			c.taken[key] = j.stamp
		}
		onErr := c.onErr
		c.mu.Unlock()
		for key, j := range jobs {
			if err := j.do(); err != nil {
				onErr(j.path, err)
			}
			if j.remove { // the record is gone: nothing of it to order any more
				c.mu.Lock()
				if c.taken[key] == j.stamp {
					delete(c.taken, key)
				}
				c.mu.Unlock()
			}
		}
	}
}

// flush waits until every job queued so far is done.
func (c *copyWriter) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 || c.busy {
		c.idle.Wait()
	}
}

// close does the jobs queued and stops the goroutine.
func (c *copyWriter) close() {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.stopped
}
