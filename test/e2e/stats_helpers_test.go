package e2e

import (
	"strconv"
	"testing"
)

// crictlStat is one entry of crictl stats -o json, its figures as numbers
// (crictl prints them as strings, empty for none: 0 here).
type crictlStat struct {
	ID                                                   string
	CPUNanos, WorkingSetBytes, UsageBytes, WritableBytes uint64
}

// stats is crictl stats -o json --id id, every entry it prints.
func (c *crimux) stats(t *testing.T, id string) []crictlStat {
	t.Helper()
	type value struct{ Value string }
	var out struct {
		Stats []struct {
			Attributes struct{ ID string } `json:"attributes"`
			CPU        struct {
				UsageCoreNanoSeconds value `json:"usageCoreNanoSeconds"`
			} `json:"cpu"`
			Memory struct {
				WorkingSetBytes value `json:"workingSetBytes"`
				UsageBytes      value `json:"usageBytes"`
			} `json:"memory"`
			WritableLayer struct {
				UsedBytes value `json:"usedBytes"`
			} `json:"writableLayer"`
		} `json:"stats"`
	}
	mustJSON(t, c.crictl("stats", "-o", "json", "--id", id), &out)
	n := func(v value) uint64 {
		x, _ := strconv.ParseUint(v.Value, 10, 64)
		return x
	}
	var st []crictlStat
	for _, s := range out.Stats {
		st = append(st, crictlStat{ID: s.Attributes.ID, CPUNanos: n(s.CPU.UsageCoreNanoSeconds),
			WorkingSetBytes: n(s.Memory.WorkingSetBytes), UsageBytes: n(s.Memory.UsageBytes), WritableBytes: n(s.WritableLayer.UsedBytes)})
	}
	return st
}

// stat is the one entry crictl stats --id id prints; anything else fails
// the test.
func (c *crimux) stat(t *testing.T, id string) crictlStat {
	t.Helper()
	st := c.stats(t, id)
	if len(st) != 1 {
		t.Fatalf("crictl stats --id %s: %+v, want one entry", id, st)
	}
	return st[0]
}
