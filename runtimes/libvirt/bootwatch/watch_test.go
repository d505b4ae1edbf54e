package bootwatch

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type report struct {
	id, how string
	booted  bool
	late    bool
}

type recorder struct {
	mu  sync.Mutex
	got []report
	ch  chan report
}

func newRecorder() *recorder { return &recorder{ch: make(chan report, 16)} }

func (r *recorder) Stuck(id string, _ time.Duration) { r.add(report{id: id}) }

func (r *recorder) Booted(id, how string, _ time.Duration, late bool) {
	r.add(report{id: id, how: how, booted: true, late: late})
}

func (r *recorder) add(rep report) {
	r.mu.Lock()
	r.got = append(r.got, rep)
	r.mu.Unlock()
	r.ch <- rep
}

func (r *recorder) next(t *testing.T) report {
	t.Helper()
	select {
	case rep := <-r.ch:
		return rep
	case <-time.After(5 * time.Second):
		t.Fatal("no report within 5s")
		return report{}
	}
}

func (r *recorder) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case rep := <-r.ch:
		t.Fatalf("unexpected report %+v", rep)
	case <-time.After(d):
	}
}

// switchSign is a guest that shows itself once on is set.
type switchSign struct{ on atomic.Bool }

func (s *switchSign) sign() (string, bool) { return "a packet", s.on.Load() }

func TestBootedBeforeTimeoutIsReportedOnce(t *testing.T) {
	rec := newRecorder()
	w := &Watcher{Timeout: time.Hour, Every: time.Millisecond, Reports: rec}
	s := &switchSign{}
	w.Watch("a", time.Now(), s.sign)
	rec.none(t, 20*time.Millisecond)
	s.on.Store(true)
	if got := rec.next(t); got != (report{id: "a", how: "a packet", booted: true}) {
		t.Fatalf("report %+v", got)
	}
	rec.none(t, 20*time.Millisecond)
	if _, stuck := w.Stuck("a"); stuck {
		t.Fatal("a booted VM is stuck")
	}
}

func TestStuckThenLate(t *testing.T) {
	rec := newRecorder()
	w := &Watcher{Timeout: 30 * time.Millisecond, Every: 5 * time.Millisecond, Reports: rec}
	s := &switchSign{}
	start := time.Now()
	w.Watch("a", start, s.sign)
	if got := rec.next(t); got != (report{id: "a"}) {
		t.Fatalf("report %+v, want stuck", got)
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Fatalf("stuck after %v, before the timeout", time.Since(start))
	}
	if since, stuck := w.Stuck("a"); !stuck || !since.Equal(start) {
		t.Fatalf("Stuck = %v, %v", since, stuck)
	}
	rec.none(t, 30*time.Millisecond) // stuck is reported once
	s.on.Store(true)
	if got := rec.next(t); got != (report{id: "a", how: "a packet", booted: true, late: true}) {
		t.Fatalf("report %+v, want booted late", got)
	}
	if _, stuck := w.Stuck("a"); stuck {
		t.Fatal("still stuck after booting")
	}
}

func TestRestartedLongAgoIsStuckAtOnce(t *testing.T) {
	rec := newRecorder()
	w := &Watcher{Timeout: time.Minute, Every: time.Hour, Reports: rec}
	w.Watch("a", time.Now().Add(-2*time.Minute), (&switchSign{}).sign)
	if got := rec.next(t); got != (report{id: "a"}) {
		t.Fatalf("report %+v, want stuck", got)
	}
}

func TestForgetAndReplace(t *testing.T) {
	rec := newRecorder()
	w := &Watcher{Timeout: 20 * time.Millisecond, Every: time.Millisecond, Reports: rec}
	w.Watch("a", time.Now(), (&switchSign{}).sign)
	w.Forget("a")
	rec.none(t, 50*time.Millisecond)

	s := &switchSign{}
	w.Watch("b", time.Now().Add(-time.Hour), s.sign)
	if got := rec.next(t); got.booted {
		t.Fatalf("report %+v, want stuck", got)
	}
	// A new boot replaces the watch: not stuck until its own timeout.
	w.Watch("b", time.Now(), s.sign)
	if _, stuck := w.Stuck("b"); stuck {
		t.Fatal("a new boot inherits the old one's stuck")
	}
	if got := rec.next(t); got != (report{id: "b"}) {
		t.Fatalf("report %+v, want stuck", got)
	}
	w.ForgetAll()
	rec.none(t, 30*time.Millisecond)
}

func TestZeroTimeoutWatchesNothing(t *testing.T) {
	rec := newRecorder()
	w := &Watcher{Reports: rec, Every: time.Millisecond}
	w.Watch("a", time.Now().Add(-time.Hour), (&switchSign{}).sign)
	rec.none(t, 20*time.Millisecond)
}

// TestSetTimeoutReachesRunningWatches: a reload's shorter timeout makes
// a watch already running report its VM stuck; 0 stops reporting.
func TestSetTimeoutReachesRunningWatches(t *testing.T) {
	rec := newRecorder()
	w := &Watcher{Timeout: time.Hour, Every: time.Millisecond, Reports: rec}
	w.Watch("a", time.Now(), (&switchSign{}).sign)
	rec.none(t, 20*time.Millisecond)
	w.SetTimeout(10 * time.Millisecond)
	if got := rec.next(t); got != (report{id: "a"}) {
		t.Fatalf("report %+v, want a stuck under the new timeout", got)
	}
	w.SetTimeout(0)
	w.Watch("b", time.Now().Add(-time.Hour), (&switchSign{}).sign)
	rec.none(t, 20*time.Millisecond)
	if got := w.CurrentTimeout(); got != 0 {
		t.Fatalf("CurrentTimeout() = %v after SetTimeout(0)", got)
	}
}
