package core

import "strconv"

// HumanBytes writes a size in the largest binary unit it fills.
func HumanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	return strconv.FormatFloat(f, 'f', -1, 64) + " " + units[i]
}

// ShortBytes writes a size with one decimal in the largest binary unit
// it fills (log lines and notes: an import's, the state dir's room).
func ShortBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i]
}
