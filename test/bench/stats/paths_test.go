package stats

import (
	"slices"
	"testing"
	"time"
)

func TestAlternatePaths(t *testing.T) {
	var order []Path
	got, err := AlternatePaths(5, 2, []Path{Direct, ViaCrimux, RawProxy}, func(p Path) (time.Duration, error) {
		order = append(order, p)
		return time.Duration(p), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	D, C, R := Direct, ViaCrimux, RawProxy
	want := []Path{D, D, C, C, R, R, C, C, R, R, D, D, R, D, C}
	if !slices.Equal(order, want) {
		t.Errorf("order = %v, want %v", order, want)
	}
	for _, p := range []Path{D, C, R} {
		if len(got[p]) != 5 {
			t.Errorf("%s: %d samples, want 5", p, len(got[p]))
		}
	}
}
