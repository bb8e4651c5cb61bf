package exec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/proc"
	"github.com/dshd/dshd/internal/proctest"
)

// TestRecoverLost writes the index an earlier run would have left: one job
// whose leader still runs, one whose pid now belongs to another process (a
// different start time), and one cut short by the crash. New must kill only
// the first, and report all three lost.
func TestRecoverLost(t *testing.T) {
	home := t.TempDir()
	spawn := func() *osexec.Cmd {
		c := osexec.Command("sleep", "300")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	ours, recycled := spawn(), spawn()
	start := func(pid int) uint64 {
		st, ok := proc.ReadStat(pid)
		if !ok {
			t.Fatalf("no stat for %d", pid)
		}
		return st.Start()
	}
	dir := filepath.Join(home, "jobs", "running")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(ent indexEntry) {
		b, _ := json.Marshal(ent)
		if err := os.WriteFile(filepath.Join(dir, ent.ID+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	write(indexEntry{ID: "job_ours", AgentID: "agt_1", Command: "sleep 300", Background: true, CreatedAt: created, StartedAt: created,
		PID: ours.Process.Pid, LeaderStart: start(ours.Process.Pid)})
	write(indexEntry{ID: "job_recycled", Command: "sleep 300", PID: recycled.Process.Pid, LeaderStart: start(recycled.Process.Pid) + 1})
	if err := os.WriteFile(filepath.Join(dir, "job_torn.json"), []byte(`{"id":"job_to`), 0o600); err != nil {
		t.Fatal(err)
	}

	e := newTestExecutor(t, func(o *Options) { o.Home = home; o.Containment = ContainmentGroup })

	exited := make(chan error, 1)
	go func() { exited <- ours.Wait() }()
	select {
	case <-exited:
	case <-time.After(proctest.Deadline):
		t.Fatal("the indexed leader with a matching start time was not killed")
	}
	if proctest.Gone(recycled.Process.Pid) {
		t.Fatal("a process whose pid matched but start time did not was killed")
	}

	lost := e.Jobs("", StateLost)
	if len(lost) != 3 {
		t.Fatalf("lost jobs = %+v, want 3", lost)
	}
	j, err := e.Job("job_ours")
	if err != nil {
		t.Fatal(err)
	}
	s := j.Snapshot()
	if s.State != StateLost || s.AgentID != "agt_1" || s.Command != "sleep 300" || !s.Background || s.ExitCode != nil || s.EndedAt == nil || !s.CreatedAt.Equal(created) {
		t.Errorf("lost snapshot = %+v", s)
	}
	select {
	case <-j.Done():
	default:
		t.Error("a lost job is not done")
	}
	if _, err := j.ReadOutput(Stdout, 0, make([]byte, 10)); !errors.Is(err, io.EOF) {
		t.Errorf("ReadOutput of a lost job = %v, want EOF", err)
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Errorf("index still holds %d entries after recovery", len(des))
	}
}

// TestIndexFollowsRunningJobs checks the index holds exactly the running
// jobs, with what recovery needs.
func TestIndexFollowsRunningJobs(t *testing.T) {
	e := newTestExecutor(t, nil)
	j, err := e.Start(testCtx(t), Spec{Command: "sleep 300", Background: true, AgentID: "agt_x"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.indexDir(), indexLogName)
	ents, err := readIndexLog(path)
	if err != nil || len(ents) != 1 {
		t.Fatalf("running job not indexed: %v %+v", err, ents)
	}
	ent := ents[0]
	st, ok := proc.ReadStat(ent.PID)
	if ent.ID != j.ID() || ent.AgentID != "agt_x" || ent.PID != j.Snapshot().PID || !ok || st.Start() != ent.LeaderStart {
		t.Errorf("index entry = %+v; leader stat %+v", ent, st)
	}
	if (e.Containment().Mode == ContainmentCgroup) != (ent.Cgroup != "") {
		t.Errorf("index entry cgroup %q in mode %s", ent.Cgroup, e.Containment().Mode)
	}
	if _, err := e.Cancel(testCtx(t), j.ID()); err != nil {
		t.Fatal(err)
	}
	if ents, err := readIndexLog(path); err != nil || len(ents) != 0 {
		t.Errorf("finished job still indexed: %v %+v", err, ents)
	}
}

// TestIndexLogCompactsAndRecovers: the running index is a log of two
// writes per job; past indexCompactAt it is rewritten with the running
// jobs alone, and the next start after a crash (the executor is never
// closed) reports exactly those jobs lost, skipping a line torn by a crash
// of the machine.
func TestIndexLogCompactsAndRecovers(t *testing.T) {
	home := t.TempDir()
	e := newTestExecutor(t, func(o *Options) { o.Home = home })
	bg, err := e.Start(testCtx(t), Spec{Command: "sleep 300", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Cancel(testCtx(t), bg.ID()) })
	path := filepath.Join(home, "jobs", "running", indexLogName)
	// Enough ended entries to pass indexCompactAt, without running as many
	// jobs: the log is the executor's own.
	line := func(id string) []byte {
		b, _ := json.Marshal(indexEntry{ID: id, Command: strings.Repeat("x", 400)})
		return append(b, '\n')
	}
	grown := 0
	for i := 0; grown < indexCompactAt; i++ {
		id := fmt.Sprintf("job_filler%d", i)
		if err := e.index.add(e.indexDir(), id, line(id)); err != nil {
			t.Fatal(err)
		}
		if err := e.index.remove(id); err != nil {
			t.Fatal(err)
		}
		grown += len(line(id)) + len(`{"end":""}`) + len(id) + 1
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() >= indexCompactAt {
		t.Fatalf("index log after %d bytes of ended entries: %v, size %d; want it compacted", grown, err, fi.Size())
	}
	ents, err := readIndexLog(path)
	if err != nil || len(ents) != 1 || ents[0].ID != bg.ID() {
		t.Fatalf("index after compaction = %v %+v, want the running job alone", err, ents)
	}
	// A torn line, as a crash of the machine may leave.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(`{"id":"job_torn","comm`))
	f.Close()

	// A crash: a second executor on the same home, the first never closed.
	e2 := newTestExecutor(t, func(o *Options) { o.Home = home })
	lost := e2.Jobs("", StateLost)
	if len(lost) != 1 || lost[0].ID != bg.ID() {
		t.Fatalf("lost jobs after the crash = %+v, want %s alone", lost, bg.ID())
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("index log left after recovery: %v", err)
	}
}

// TestAdoptedRecordedForRecovery: in group mode a `setsid -f` process is
// adopted by dshd and tied to no job; it is recorded (pid and start time)
// in the running index within a poll, and the next start on the same home
// (after a crash: the first executor is never closed before it) kills it,
// but not a process whose pid matches with another start time.
func TestAdoptedRecordedForRecovery(t *testing.T) {
	home := t.TempDir()
	a := newTestExecutor(t, func(o *Options) { o.Home = home; o.Containment = ContainmentGroup })
	if !a.Containment().Subreaper {
		t.Fatalf("group mode without the subreaper: %+v", a.Containment())
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := mustRun(t, a, Spec{Command: "setsid -f sh -c 'echo $$ > " + pidFile + "; exec sleep 300'; echo ok"})
	if s.ExitCode == nil || *s.ExitCode != 0 {
		t.Fatalf("job = %+v", s)
	}
	pid := proctest.ReadPID(t, pidFile)
	t.Cleanup(func() { proctest.KillIfAlive(pid) })
	st, ok := proc.ReadStat(pid)
	if !ok || st.PPID() != os.Getpid() {
		t.Fatalf("the setsid'd process %d is not adopted (stat %+v)", pid, st)
	}

	path := filepath.Join(home, "jobs", "running", proc.AdoptedFile)
	deadline := time.Now().Add(proctest.Deadline)
	for {
		var refs []adoptedRef
		b, _ := os.ReadFile(path)
		if json.Unmarshal(b, &refs) == nil && slices.Contains(refs, adoptedRef{PID: pid, Start: st.Start()}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q, want %d recorded with its start time", path, b, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}

	other := osexec.Command("sleep", "300")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	ost, _ := proc.ReadStat(other.Process.Pid)
	b, _ := json.Marshal([]adoptedRef{{PID: pid, Start: st.Start()}, {PID: other.Process.Pid, Start: ost.Start() + 1}})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	newTestExecutor(t, func(o *Options) { o.Home = home; o.Containment = ContainmentGroup })
	proctest.WaitGone(t, pid)
	if proctest.Gone(other.Process.Pid) {
		t.Error("a process whose pid matched but start time did not was killed")
	}
}

// adoptedRef is an entry of the running index's record of adopted
// processes, as the runner writes it.
type adoptedRef struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}
