package main

import (
	"runtime"
	"testing"
)

// TestRaiseProcs: dshd runs with at least minProcs Ps unless the
// GOMAXPROCS variable says otherwise, and never lowers a larger count.
func TestRaiseProcs(t *testing.T) {
	old := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	unset := func(string) string { return "" }
	set := func(k string) string {
		if k == "GOMAXPROCS" {
			return "1"
		}
		return ""
	}
	for _, tc := range []struct {
		name         string
		before, want int
		getenv       func(string) string
	}{
		{"fewer raised", 1, minProcs, unset},
		{"more kept", minProcs + 3, minProcs + 3, unset},
		{"operator's choice kept", 1, 1, set},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(tc.before)
			raiseProcs(tc.getenv)
			if got := runtime.GOMAXPROCS(0); got != tc.want {
				t.Errorf("GOMAXPROCS = %d, want %d", got, tc.want)
			}
		})
	}
}
