package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkCheckpoint measures, in process, the parts of a checkpoint a
// tool call waits for: the checkpoint itself (its fresh upper taken from
// the spare made ahead, one record appended to the state's log) and the
// next job's lease, taken at once (the view mounted afresh with one more
// layer, after the old mount's unmount), beside a lease of an agent
// without checkpoints.
func BenchmarkCheckpoint(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("overlayfs mounts need root")
	}
	home, base := b.TempDir(), b.TempDir()
	m, err := Open(filepath.Join(home, "workspaces"), "", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if ok, why := m.Available(); !ok {
		b.Skip(why)
	}
	if err := m.Adopt("a", base); err != nil {
		b.Fatal(err)
	}
	var cp, lease, plain time.Duration
	for i := range b.N {
		l, _ := m.Acquire("a")
		os.WriteFile(filepath.Join(viewPath(l.FD), fmt.Sprint("f", i)), []byte("x"), 0o644)
		l.Release()
		t0 := time.Now()
		if _, err := m.Checkpoint("a", fmt.Sprint("call_", i), int64(i)); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		l, _ = m.Acquire("a")
		t2 := time.Now()
		l.Release()
		p, _ := m.Acquire("plain")
		t3 := time.Now()
		p.Release()
		cp += t1.Sub(t0)
		lease += t2.Sub(t1)
		plain += t3.Sub(t2)
	}
	b.ReportMetric(float64(cp.Microseconds())/float64(b.N), "checkpoint-µs")
	b.ReportMetric(float64(lease.Microseconds())/float64(b.N), "remount-µs")
	b.ReportMetric(float64(plain.Microseconds())/float64(b.N), "plain-lease-µs")
}
