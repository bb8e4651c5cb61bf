package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// makeTree writes files files of size bytes each, 100 to a directory, into
// a new git repository at dir with everything committed (so `git worktree
// add` checks all of it out). The contents compress well: the repository's
// objects stay small; the checked-out and copied trees do not.
func makeTree(b *testing.B, dir string, files, size int) {
	b.Helper()
	buf := make([]byte, size)
	for i := range files {
		d := filepath.Join(dir, fmt.Sprintf("d%04d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		copy(buf, fmt.Sprintf("file %d\n", i))
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.txt", i%100)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, args := range [][]string{
		// No automatic gc: it would repack in the background while cp
		// copies the tree.
		{"init", "-q"}, {"config", "gc.auto", "0"}, {"config", "maintenance.auto", "false"}, {"add", "-A"},
		{"-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-qm", "tree"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
}

// timeCmd runs name args and returns how long it took.
func timeCmd(b *testing.B, dir, name string, args ...string) time.Duration {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(t0)
	if err != nil {
		b.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return d
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkWorkspaceFork measures a snapshot fork (POST /agents/{id}/fork
// with workspace snapshot, over HTTP, the whole fork: agent, transcript,
// layers) of a workspace of 1,000 files / 20 MiB and of 50,000 files /
// 1 GiB, beside a shared fork (the agent alone) and, on the large tree,
// `git worktree add` and `cp -a --reflink=auto` of the same tree in the same
// run. Target: under 50 ms and flat in the workspace's size. Then the first
// command (`true`) of fresh children (their views were mounted by the fork)
// beside a command of their parent and of a shared agent. Disk: the trees, one
// worktree and one copy at a time, all under the benchmark's temporary
// directory, removed at its end.
func BenchmarkWorkspaceFork(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("snapshot workspaces need root (overlayfs, mount namespaces)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("needs git")
	}
	root := b.TempDir()
	s := startServer(b)
	var h struct {
		Details struct {
			Workspaces struct {
				Snapshot bool   `json:"snapshot"`
				Reason   string `json:"reason"`
			} `json:"workspaces"`
		} `json:"details"`
	}
	if json.Unmarshal(s.get(b, "/healthz"), &h); !h.Details.Workspaces.Snapshot {
		b.Skipf("snapshot workspaces unavailable: %s", h.Details.Workspaces.Reason)
	}
	agent := func(path, body string) string {
		var a struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(s.post(b, path, []byte(body)), &a); err != nil {
			b.Fatal(err)
		}
		return a.ID
	}
	exec1 := func(id string) time.Duration {
		t0 := time.Now()
		s.post(b, "/exec", []byte(`{"command":"true","agentId":"`+id+`"}`))
		return time.Since(t0)
	}
	const forks = 15
	for _, tree := range []struct {
		name        string
		files, size int
	}{
		{"1k-20MiB", 1_000, 20 << 10},
		{"50k-1GiB", 50_000, (1 << 30) / 50_000},
	} {
		dir := filepath.Join(root, tree.name)
		t0 := time.Now()
		makeTree(b, dir, tree.files, tree.size)
		// The tree's own write-back is not the fork's: a fork writes its
		// state durably, and that fsync would otherwise wait for it.
		syscall.Sync()
		b.Logf("%s: tree written and committed in %s", tree.name, time.Since(t0).Round(time.Millisecond))

		p := agent("/agents", `{"cwd":"`+dir+`"}`)
		t0 = time.Now()
		agent("/agents/"+p+"/fork", `{"workspace":"snapshot"}`)
		first := time.Since(t0) // the parent moves onto a layer
		var snap, shared []time.Duration
		var children []string
		for range forks {
			t0 := time.Now()
			children = append(children, agent("/agents/"+p+"/fork", `{"workspace":"snapshot"}`))
			snap = append(snap, time.Since(t0))
			t0 = time.Now()
			agent("/agents/"+p+"/fork", `{}`)
			shared = append(shared, time.Since(t0))
		}
		b.ReportMetric(ms(first), tree.name+"-first-snapshot-fork-ms")
		b.ReportMetric(ms(median(snap)), tree.name+"-snapshot-fork-median-ms")
		b.ReportMetric(ms(slices.Max(snap)), tree.name+"-snapshot-fork-max-ms")
		b.ReportMetric(ms(median(shared)), tree.name+"-shared-fork-median-ms")

		// Baselines on the same tree, in the same run, one at a time.
		wt := filepath.Join(root, "worktree")
		b.ReportMetric(ms(timeCmd(b, dir, "git", "worktree", "add", "-q", "--detach", wt, "HEAD")), tree.name+"-git-worktree-add-ms")
		timeCmd(b, dir, "git", "worktree", "remove", "--force", wt)
		cp := filepath.Join(root, "copy")
		b.ReportMetric(ms(timeCmd(b, root, "cp", "-a", "--reflink=auto", dir, cp)), tree.name+"-cp-reflink-auto-ms")
		if err := os.RemoveAll(cp); err != nil {
			b.Fatal(err)
		}

		if tree.files == 50_000 {
			// The first command of each fresh child mounts its view.
			var child, parent, plain []time.Duration
			sh := agent("/agents", `{"cwd":"`+dir+`"}`)
			for _, c := range children {
				child = append(child, exec1(c))
				parent = append(parent, exec1(p))
				plain = append(plain, exec1(sh))
			}
			b.ReportMetric(ms(median(child)), "first-command-in-child-median-ms")
			b.ReportMetric(ms(median(parent)), "command-in-parent-median-ms")
			b.ReportMetric(ms(median(plain)), "command-shared-agent-median-ms")
		}
	}
}

// BenchmarkExecWhileDiff measures `POST /exec` of `true` for one agent while
// another agent's `GET /agents/{id}/workspace/changes?diff=true` over 20,000
// changed files runs in a loop, beside the same with nothing else running
// (idle), interleaved in rounds in the same run: no job start waits on
// another agent's workspace work. Target: p99 within 2x of idle.
func BenchmarkExecWhileDiff(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("snapshot workspaces need root (overlayfs, mount namespaces)")
	}
	const files, rounds, perRound = 20_000, 10, 100
	root := b.TempDir()
	ws := filepath.Join(root, "ws")
	line := strings.Repeat("a line of the file\n", 8)
	for i := range files {
		d := filepath.Join(ws, fmt.Sprintf("d%03d", i/200))
		if i%200 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.txt", i%200)), []byte(fmt.Sprintf("file %d\n%s", i, line)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	other := filepath.Join(root, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		b.Fatal(err)
	}
	s := startServer(b)
	var h struct {
		Details struct {
			Workspaces struct {
				Snapshot bool   `json:"snapshot"`
				Reason   string `json:"reason"`
			} `json:"workspaces"`
		} `json:"details"`
	}
	if json.Unmarshal(s.get(b, "/healthz"), &h); !h.Details.Workspaces.Snapshot {
		b.Skipf("snapshot workspaces unavailable: %s", h.Details.Workspaces.Reason)
	}
	agent := func(path, body string) string {
		var a struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(s.post(b, path, []byte(body)), &a); err != nil {
			b.Fatal(err)
		}
		return a.ID
	}
	p := agent("/agents", `{"cwd":"`+ws+`"}`)
	c := agent("/agents/"+p+"/fork", `{"workspace":"snapshot"}`)
	var j struct {
		ExitCode *int `json:"exitCode"`
	}
	body, _ := json.Marshal(map[string]any{"agentId": c, "timeoutMs": 600_000,
		"command": "find . -name '*.txt' -print0 | xargs -0 sed -i 's/^a line/a changed line/'"})
	if json.Unmarshal(s.post(b, "/exec", body), &j); j.ExitCode == nil || *j.ExitCode != 0 {
		b.Fatalf("changing the child's files: exit %v", j.ExitCode)
	}
	var cs struct {
		Changes []json.RawMessage `json:"changes"`
	}
	t0 := time.Now()
	if json.Unmarshal(s.get(b, "/agents/"+c+"/workspace/changes?diff=true"), &cs); len(cs.Changes) != files {
		b.Fatalf("the child's changes: %d, want %d", len(cs.Changes), files)
	}
	diffTime := time.Since(t0)

	a := agent("/agents", `{"cwd":"`+other+`"}`)
	execBody := []byte(`{"command":"true","agentId":"` + a + `"}`)
	exec1 := func() time.Duration {
		t0 := time.Now()
		s.post(b, "/exec", execBody)
		return time.Since(t0)
	}
	for range 20 {
		exec1() // warm: the agent's first jobs, the connections
	}
	var idle, busy []time.Duration
	var diffs atomic.Int64
	b.ResetTimer()
	for range rounds {
		for range perRound {
			idle = append(idle, exec1())
		}
		// The other agent's listing runs in a loop meanwhile; the round
		// starts once one is in flight and ends when the last is done.
		stop := make(chan struct{})
		started := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			once := sync.OnceFunc(func() { close(started) })
			for {
				select {
				case <-stop:
					return
				default:
				}
				once()
				s.get(b, "/agents/"+c+"/workspace/changes?diff=true")
				diffs.Add(1)
			}
		}()
		<-started
		for range perRound {
			busy = append(busy, exec1())
		}
		close(stop)
		wg.Wait()
	}
	b.StopTimer()
	ratio50 := float64(percentile(busy, .5)) / float64(percentile(idle, .5))
	ratio99 := float64(percentile(busy, .99)) / float64(percentile(idle, .99))
	b.ReportMetric(ms(percentile(idle, .5)), "idle-exec-p50-ms")
	b.ReportMetric(ms(percentile(idle, .99)), "idle-exec-p99-ms")
	b.ReportMetric(ms(percentile(busy, .5)), "while-diff-exec-p50-ms")
	b.ReportMetric(ms(percentile(busy, .99)), "while-diff-exec-p99-ms")
	b.ReportMetric(ratio50, "p50-ratio")
	b.ReportMetric(ratio99, "p99-ratio")
	b.ReportMetric(ms(diffTime), "one-diff-listing-ms")
	fmt.Printf("exec while diff: %d execs each, %d listings of %d changed files (one alone: %s) ran meanwhile\n"+
		"  idle:       p50 %.2f ms  p99 %.2f ms  max %.2f ms\n  while diff: p50 %.2f ms  p99 %.2f ms  max %.2f ms\n  ratio:      p50 %.2fx  p99 %.2fx (target p99 <= 2x)\n",
		len(idle), diffs.Load(), files, diffTime.Round(time.Millisecond),
		ms(percentile(idle, .5)), ms(percentile(idle, .99)), ms(slices.Max(idle)),
		ms(percentile(busy, .5)), ms(percentile(busy, .99)), ms(slices.Max(busy)), ratio50, ratio99)
}
