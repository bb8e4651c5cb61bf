// Package benchkit holds what the benchmarks behind make bench share:
// interleaving a figure's runs with its baseline's, so that the machine's
// load hits both alike; running N clients at once; percentiles; and the
// load average printed beside each figure. Only benchmarks use it.
package benchkit

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of d, which it does not
// change; 0 for none.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// Median is Percentile(d, .5).
func Median(d []time.Duration) time.Duration { return Percentile(d, .5) }

// Us is d in microseconds.
func Us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// Ratio is a/b as a float.
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// LoadAvg is the first three fields of /proc/loadavg ("?" if unreadable).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// Load1 is the load average of the last minute (0 if unreadable).
func Load1() float64 {
	l, _, _ := strings.Cut(LoadAvg(), " ")
	v, _ := strconv.ParseFloat(l, 64)
	return v
}

// Interleave runs rounds rounds of ops, each op once per round in the order
// given, and returns each op's durations (out[i] for ops[i]). A baseline
// and the figure beside it taken this way see the same machine.
func Interleave(rounds int, ops ...func()) [][]time.Duration {
	out := make([][]time.Duration, len(ops))
	for i := range out {
		out[i] = make([]time.Duration, 0, rounds)
	}
	for range rounds {
		for i, op := range ops {
			t0 := time.Now()
			op()
			out[i] = append(out[i], time.Since(t0))
		}
	}
	return out
}

// Concurrent runs total calls of op from clients goroutines at once, each
// call given its client's number and the call's sequence number (0 ≤ seq <
// total), and returns the wall time of the whole and each call's duration.
func Concurrent(clients, total int, op func(client, seq int)) (time.Duration, []time.Duration) {
	var next atomic.Int64
	each := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for {
				seq := int(next.Add(1) - 1)
				if seq >= total {
					return
				}
				t0 := time.Now()
				op(c, seq)
				each[c] = append(each[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	return wall, slices.Concat(each...)
}
