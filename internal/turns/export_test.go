package turns

import (
	"runtime"
	"strings"
)

// queued counts the goroutines parked in Take's wait: a channel does not
// say how many senders wait on it, but a goroutine parked in a select has
// joined the channel's queue before it parked.
func queued(g *Gate) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, gr := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(gr, "[select]") && strings.Contains(gr, "turns.(*Gate).Take(") {
			n++
		}
	}
	return n
}
