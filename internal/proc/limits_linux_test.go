package proc

import (
	"fmt"
	"testing"
	"time"
)

// TestCPUThrottleGivesTheShare drives the throttle with a job that uses
// every CPU it is given (n CPUs at once while thawed) and checks what it
// got over 20 s of simulated time is its share, give or take a tick's
// worth.
func TestCPUThrottleGivesTheShare(t *testing.T) {
	for _, tt := range []struct {
		share float64
		cpus  int
	}{{0.1, 1}, {0.5, 1}, {0.5, 2}, {1.5, 2}, {2, 1}} {
		t.Run(fmt.Sprintf("share %v on %d busy CPUs", tt.share, tt.cpus), func(t *testing.T) {
			now := time.Unix(1000, 0)
			c := newCPUThrottle(tt.share, now)
			var used time.Duration
			frozen := false
			const total = 20 * time.Second
			for elapsed := time.Duration(0); elapsed < total; elapsed += LimitWatchInterval {
				if !frozen {
					used += time.Duration(tt.cpus) * LimitWatchInterval
				}
				now = now.Add(LimitWatchInterval)
				frozen = c.step(now, used)
			}
			want := time.Duration(min(tt.share, float64(tt.cpus)) * float64(total))
			slack := time.Duration(tt.cpus)*LimitWatchInterval + c.burst
			if used < want-slack || used > want+slack {
				t.Errorf("used %v of CPU in %v, want %v ± %v", used, total, want, slack)
			}
		})
	}
}
