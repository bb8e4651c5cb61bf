package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkCheckpoints measures what checkpoints add to a model's tool
// call, over HTTP against the real binary, on a git repository of 2,000
// files: a bash call that changes 1 file, and one that writes 1,000,
// through a root agent with a snapshot view (each call ends with a
// checkpoint) beside the same call through an agent without one
// (targets: under 1 ms and under 5 ms added at the median), interleaved;
// the shadow-git baseline on the same tree after the same change, run
// directly (`git stash create`, and `git add -A && git commit`); then the
// time of a rewind (its undo, and the next call, which mounts the view
// afresh) with 10 and with 500 checkpoints (past overlayfs's 500 layers:
// compacted), beside those baselines.
func BenchmarkCheckpoints(b *testing.B) {
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
	trees := map[string]string{}
	for _, name := range []string{"snap", "plain", "git", "floor"} {
		trees[name] = filepath.Join(root, name)
		makeTree(b, trees[name], 2_000, 256)
	}
	agent := func(body string) string {
		var a struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(s.post(b, "/agents", []byte(body)), &a); err != nil {
			b.Fatal(err)
		}
		return a.ID
	}
	snap := agent(`{"cwd":"` + trees["snap"] + `","workspace":"snapshot"}`)
	plain := agent(`{"cwd":"` + trees["plain"] + `"}`)
	n := 0
	call := func(id, command string) time.Duration {
		n++
		body, _ := json.Marshal(map[string]any{"callId": fmt.Sprintf("call_%d", n), "arguments": map[string]any{"command": command}})
		t0 := time.Now()
		s.post(b, "/agents/"+id+"/tools/bash", body)
		return time.Since(t0)
	}
	sh := func(command string) time.Duration {
		t0 := time.Now()
		if out, err := exec.Command("bash", "-c", command).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v: %s", command, err, out)
		}
		return time.Since(t0)
	}
	// The kernel's floor: the same command run directly in an overlay
	// mounted afresh over the tree (nothing of dshd's), so that every file
	// it writes is copied up from the lower layer, as a call's writes are
	// from the checkpoint before it; beside it the command run directly
	// in place.
	floor := func(command string) time.Duration {
		dir := b.TempDir()
		up, work, merged := filepath.Join(dir, "u"), filepath.Join(dir, "w"), filepath.Join(dir, "m")
		for _, d := range []string{up, work, merged} {
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+trees["floor"]+",upperdir="+up+",workdir="+work); err != nil {
			b.Skipf("overlayfs: %v", err)
		}
		defer unix.Unmount(merged, unix.MNT_DETACH)
		return sh("cd " + merged + " && " + command)
	}
	// The overlay view alone: the same command writing nothing, through
	// the snapshot agent (its view is an overlay; the call's end finds it
	// unchanged and makes no checkpoint) beside the agent without one,
	// so that the 1-file figure below separates the view's cost from the
	// checkpoint's.
	{
		var view, without []time.Duration
		for range 100 {
			without = append(without, call(plain, `echo $RANDOM >> /dev/null`))
			view = append(view, call(snap, `echo $RANDOM >> /dev/null`))
		}
		b.ReportMetric(ms(median(view)), "0-files-call-in-view-median-ms")
		b.ReportMetric(ms(median(without)), "0-files-call-without-median-ms")
		b.ReportMetric(ms(median(view)-median(without)), "0-files-view-added-ms")
		b.Logf("0-files: a call that changes nothing %.2f ms through the snapshot view (no checkpoint), %.2f ms without (+%.2f ms: the view's own cost)",
			ms(median(view)), ms(median(without)), ms(median(view)-median(without)))
	}
	var plainCall, gitStash, gitCommit time.Duration // the 1-file figures
	for _, c := range []struct {
		name    string
		command string
		rounds  int
	}{
		{"1-file", `echo $RANDOM >> d0000/f000.txt`, 100},
		// printf -v: no subshell per file, so that the command costs
		// little beside what a checkpoint may add.
		{"1000-files", `for i in $(seq 0 999); do printf -v f 'd000%d/f%03d.txt' $((i / 100 % 10)) $((i % 100)); echo $RANDOM > $f; done`, 20},
	} {
		var withCP, without, stash, commit, copyUp, inPlace []time.Duration
		for range c.rounds {
			without = append(without, call(plain, c.command))
			withCP = append(withCP, call(snap, c.command))
			inPlace = append(inPlace, sh("cd "+trees["git"]+" && "+c.command))
			copyUp = append(copyUp, floor(c.command))
			stash = append(stash, sh("cd "+trees["git"]+" && git stash create >/dev/null"))
			commit = append(commit, sh("cd "+trees["git"]+" && git add -A && git -c user.name=b -c user.email=b@example.com commit -qm c"))
		}
		added := median(withCP) - median(without)
		b.ReportMetric(ms(median(withCP)), c.name+"-call-with-checkpoint-median-ms")
		b.ReportMetric(ms(median(without)), c.name+"-call-without-median-ms")
		b.ReportMetric(ms(added), c.name+"-added-ms")
		b.ReportMetric(ms(median(stash)), c.name+"-git-stash-create-median-ms")
		b.ReportMetric(ms(median(commit)), c.name+"-git-add-commit-median-ms")
		b.ReportMetric(ms(median(copyUp)-median(inPlace)), c.name+"-kernel-copy-up-added-ms")
		b.Logf("%s: call %.2f ms with a checkpoint, %.2f ms without (+%.2f ms); shadow git on the same tree: stash create %.2f ms, add -A && commit %.2f ms; "+
			"the kernel's floor: the command run directly %.2f ms in place, %.2f ms in a fresh overlay over the tree (+%.2f ms of copy-up)",
			c.name, ms(median(withCP)), ms(median(without)), ms(added), ms(median(stash)), ms(median(commit)),
			ms(median(inPlace)), ms(median(copyUp)), ms(median(copyUp)-median(inPlace)))
		if c.name == "1-file" {
			plainCall, gitStash, gitCommit = median(without), median(stash), median(commit)
		}
	}

	// Rewinds: a fresh agent with k checkpoints (500 is past what
	// overlayfs mounts: the older ones are compacted, the newest
	// workspaces.checkpointDepth kept), rewound to before its fifth call
	// from the end (a kept checkpoint) and undone, alternately; beside
	// them the plain call and the shadow git of the same run.
	for _, k := range []int{10, 500} {
		dir := filepath.Join(root, fmt.Sprintf("rewind-%d", k))
		makeTree(b, dir, 100, 64)
		a := agent(`{"cwd":"` + dir + `","workspace":"snapshot"}`)
		first := n + 1
		for i := range k {
			call(a, fmt.Sprintf("echo %d > cp_%d.txt", i, i))
		}
		target := fmt.Sprintf("call_%d", first+k-5)
		var list struct {
			Checkpoints []struct {
				Compacted bool `json:"compacted"`
			} `json:"checkpoints"`
		}
		json.Unmarshal(s.get(b, "/agents/"+a+"/checkpoints"), &list)
		compacted := 0
		for _, c := range list.Checkpoints {
			if c.Compacted {
				compacted++
			}
		}
		var rewind, undo []time.Duration
		for range 15 {
			t0 := time.Now()
			s.post(b, "/agents/"+a+"/rewind", []byte(`{"callId":"`+target+`","to":"before"}`))
			rewind = append(rewind, time.Since(t0))
			t0 = time.Now()
			s.post(b, "/agents/"+a+"/rewind", []byte(`{"undo":true}`))
			undo = append(undo, time.Since(t0))
		}
		// The first command after a rewind mounts the view afresh.
		var next []time.Duration
		for range 5 {
			s.post(b, "/agents/"+a+"/rewind", []byte(`{"callId":"`+target+`","to":"before"}`))
			next = append(next, call(a, "true"))
			s.post(b, "/agents/"+a+"/rewind", []byte(`{"undo":true}`))
		}
		b.ReportMetric(ms(median(rewind)), fmt.Sprintf("rewind-%d-checkpoints-median-ms", k))
		b.ReportMetric(ms(median(undo)), fmt.Sprintf("undo-%d-checkpoints-median-ms", k))
		b.ReportMetric(ms(median(next)), fmt.Sprintf("call-after-rewind-%d-checkpoints-median-ms", k))
		b.Logf("%d checkpoints (%d listed, %d of them compacted runs): rewind %.2f ms, undo %.2f ms, the next call %.2f ms (medians); beside: a call without checkpoints %.2f ms, git stash create %.2f ms, git add -A && commit %.2f ms",
			k, len(list.Checkpoints), compacted, ms(median(rewind)), ms(median(undo)), ms(median(next)), ms(plainCall), ms(gitStash), ms(gitCommit))
	}
}
