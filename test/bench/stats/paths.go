package stats

import (
	"fmt"
	"time"
)

// AlternatePaths is Alternate for any number of paths: blocks of block
// calls per path, the order rotating by one path each turn (A B C, B C A,
// C A B, …) so that each path takes each place in the order equally often.
func AlternatePaths(n, block int, paths []Path, call func(Path) (time.Duration, error)) (map[Path]Samples, error) {
	block = max(1, block)
	out := make(map[Path]Samples, len(paths))
	for done, turn := 0, 0; done < n; turn++ {
		k := min(block, n-done)
		for i := range paths {
			p := paths[(turn+i)%len(paths)]
			for range k {
				t, err := call(p)
				if err != nil {
					return out, fmt.Errorf("%s: %w", p, err)
				}
				out[p] = append(out[p], t)
			}
		}
		done += k
	}
	return out, nil
}
