package tests

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// BenchmarkCrashRecovery50 kills the server with SIGKILL while 50
// background jobs run, restarts it on the same home, and times the restart
// until the last process of those jobs is gone. Budget: within 1 s. The
// baseline is the same server's restart to ready on a home with nothing
// left over, measured in the same run.
func BenchmarkCrashRecovery50(b *testing.B) {
	const jobs = 50
	var gone, ready, baseline time.Duration
	for range b.N {
		home := b.TempDir()
		s := startServer(b, withHome(home), withConfig("jobs:\n  retainMax: 100\n"))
		s.stop(b)
		t0 := time.Now()
		s = startServer(b, withHome(home), withConfig("jobs:\n  retainMax: 100\n"))
		baseline += time.Since(t0)

		run := randomMark(b)
		for i := range jobs {
			body := fmt.Sprintf(`{"command":"export %s='%s/%d;'; sleep 300 & sleep 300","background":true}`, markEnv, run, i)
			var j job
			if err := json.Unmarshal(s.post(b, "/exec", []byte(body)), &j); err != nil {
				b.Fatal(err)
			}
		}
		for i := range jobs {
			waitMarked(b, fmt.Sprintf("%s/%d", run, i))
		}
		s.crash(b)

		t0 = time.Now()
		done := make(chan time.Duration, 1)
		go func() {
			for time.Since(t0) < 30*time.Second {
				if pids, _ := marked(run + "/"); len(pids) == 0 {
					done <- time.Since(t0)
					return
				}
				time.Sleep(time.Millisecond)
			}
			done <- -1
		}()
		s = startServer(b, withHome(home), withConfig("jobs:\n  retainMax: 100\n"))
		ready += time.Since(t0)
		d := <-done
		if d < 0 {
			killPIDs(survivorsNow(run + "/"))
			b.Fatalf("processes of the crashed run still alive 30s after the restart")
		}
		gone += d
		s.stop(b)
	}
	n := float64(b.N)
	b.ReportMetric(float64(gone.Milliseconds())/n, "restart-to-none-left-ms")
	b.ReportMetric(float64(ready.Milliseconds())/n, "restart-to-ready-ms")
	b.ReportMetric(float64(baseline.Milliseconds())/n, "baseline-clean-restart-to-ready-ms")
}
