package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dshd/dshd/internal/testenv"
)

// manifest is a command printing every path of the working directory with
// its type, permissions, link target and a hash of its contents: two equal
// manifests are two trees equal byte for byte (.git included).
const manifest = `find . -mindepth 1 -printf '%y %m %p -> %l\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum`

type checkpointList struct {
	Checkpoints []struct {
		CallIDs []string   `json:"callIds"`
		CallID  string     `json:"callId"`
		Seq     int64      `json:"seq"`
		Changes []wsChange `json:"changes"`
	} `json:"checkpoints"`
	Pending []string `json:"pending"`
	Undo    bool     `json:"undo"`
}

// toolCall runs the bash tool as a model would and returns its text.
func (s *testServer) toolCall(t *testing.T, agent, callID, command string) string {
	t.Helper()
	var res struct {
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	}
	body := map[string]any{"callId": callID, "arguments": map[string]any{"command": command}}
	if st := s.DoJSON(t, "POST", "/agents/"+agent+"/tools/bash", body, &res); st != 200 || res.IsError {
		t.Fatalf("bash %s %q = %d %+v", callID, command, st, res)
	}
	return res.Text
}

// TestCheckpointsThroughBash: a root agent with a snapshot view of a git
// repository makes ten tool calls that change it with bash alone (sed -i,
// rm -r, mv, chmod, a link, git checkout, a build writing ignored output,
// a call that changes nothing); its view rewound to before call 4 is,
// byte for byte, what it was then; the rewind is undone; a fork from call
// 7 has the view as it was after call 7 and the transcript up to it.
func TestCheckpointsThroughBash(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	repo := gitRepo(t)
	s := startServer(t, withHome(filepath.Join(t.TempDir(), "home")))
	needSnapshots(t, s)
	baseState, err := runIn(repo, nil, "sh", "-c", manifest)
	if err != nil {
		t.Fatal(err)
	}
	a := s.newAgent(t, "/agents", map[string]any{"cwd": repo, "workspace": "snapshot"})
	if a.Workspace.Mode != "snapshot" || a.Workspace.Path != repo {
		t.Fatalf("a root agent with a snapshot view: %+v", a.Workspace)
	}
	calls := []string{
		"sed -i 's/base/changed by sed/' f.txt",
		"rm -r src/lib",
		"mv README.md README.txt",
		"chmod 700 untracked.txt && mkdir -p docs && echo guide > docs/guide.md",
		"ln -s docs/guide.md GUIDE && echo more >> .env",
		"git checkout -q -- f.txt",
		"mkdir -p build && echo built > build/out.o && echo log > build/log.txt",
		"true",
		"git -c user.name=t -c user.email=t@example.com commit -qam 'from the model' && rm -f untracked.txt",
		"printf 'new\\n' > src/new.go",
	}
	var before, after []string
	for i, c := range calls {
		before = append(before, s.toolCall(t, a.ID, fmt.Sprintf("call_%d", i+1), manifest))
		s.toolCall(t, a.ID, fmt.Sprintf("c_%d", i+1), c)
		after = append(after, s.toolCall(t, a.ID, fmt.Sprintf("m_%d", i+1), manifest))
	}
	_ = before
	var list checkpointList
	if st := s.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints", nil, &list); st != 200 {
		t.Fatalf("checkpoints = %d", st)
	}
	// Nine calls changed the view ("true" and the manifests did not).
	if len(list.Checkpoints) != 9 {
		t.Fatalf("%d checkpoints: %+v", len(list.Checkpoints), list)
	}
	if c := list.Checkpoints[2]; c.CallID != "c_3" || strings.Join(changeList(c.Changes), ",") != "deleted README.md,added README.txt" {
		t.Errorf("checkpoint of c_3: %+v", c)
	}
	// The view before call 4 is the one the manifest after call 3 saw.
	want := after[2]
	var rw map[string]any
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"callId": "c_4", "to": "before"}, &rw); st != 200 {
		t.Fatalf("rewind = %d %v", st, rw)
	}
	if got := s.toolCall(t, a.ID, "m_rewound", manifest); got != want {
		t.Errorf("rewound to before call 4:\n got %s\nwant %s", got, want)
	}
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"undo": true}, &rw); st != 200 {
		t.Fatalf("undo = %d %v", st, rw)
	}
	if got := s.toolCall(t, a.ID, "m_undone", manifest); got != after[9] {
		t.Errorf("undone rewind:\n got %s\nwant %s", got, after[9])
	}
	// A call that changed nothing rewinds to the checkpoint before it.
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"callId": "c_8", "to": "after"}, &rw); st != 200 {
		t.Fatalf("rewind after a call that changed nothing = %d %v", st, rw)
	}
	if got := s.toolCall(t, a.ID, "m_8", manifest); got != after[7] {
		t.Errorf("after call 8:\n got %s\nwant %s", got, after[7])
	}
	if evs := s.transcript(t, a.ID, "workspace/rewind"); len(evs) != 3 {
		t.Errorf("the transcript records %d rewinds, want 3", len(evs))
	}

	c := s.newAgent(t, "/agents/"+a.ID+"/fork", map[string]any{"workspace": "snapshot", "fromCallId": "c_7"})
	if got := s.toolCall(t, c.ID, "m_child", manifest); got != after[6] {
		t.Errorf("fork from after call 7:\n got %s\nwant %s", got, after[6])
	}
	// Its transcript ends with call 7's result (then its own call).
	var last transcriptEvent
	for _, e := range s.transcript(t, c.ID, "tool/call", "tool/result") {
		if strings.Contains(string(e.Data), `"callId":"m_child"`) {
			break
		}
		last = e
	}
	if last.Type != "tool/result" || !strings.Contains(string(last.Data), `"callId":"c_7"`) {
		t.Errorf("the fork's transcript does not end at call 7: %s %s", last.Type, last.Data)
	}
	// Bad requests change nothing.
	for _, body := range []map[string]any{
		{"fromCallId": "c_7"}, // no snapshot
		{"workspace": "snapshot", "fromCallId": "c_7", "boundary": 1},
	} {
		var p wsProblem
		if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/fork", body, &p); st != 422 || p.Code != "invalid_workspace" {
			t.Errorf("fork %v = %d %+v", body, st, p)
		}
	}
	var p wsProblem
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"callId": "nope"}, &p); st != 404 || p.Code != "checkpoint_not_found" {
		t.Errorf("rewind to an unknown call = %d %+v", st, p)
	}
	// The base directory itself was never written.
	if out, err := runIn(repo, nil, "sh", "-c", manifest); err != nil || out != baseState {
		t.Errorf("the base directory changed: %v\n%s\nwas\n%s", err, out, baseState)
	}
}

// TestCheckpointCrash: dshd SIGKILLs itself at each crash point of a
// checkpoint and of a rewind; the next start on the same home shows the
// agent's view as one of its checkpoints (for a checkpoint cut before its
// record: the view after the call, its changes pending) and its list of
// checkpoints agreeing with it, never a mixture; the agent then goes on
// (another call checkpoints, a rewind works).
func TestCheckpointCrash(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	for _, point := range []string{"workspace.checkpoint.layered", "workspace.checkpoint.saved", "workspace.rewind.layered", "workspace.rewind.saved"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			repo := gitRepo(t)
			home := filepath.Join(t.TempDir(), "home")
			rewind := strings.HasPrefix(point, "workspace.rewind")
			// Two calls checkpointed, on a server without the point.
			s := startServer(t, withHome(home))
			needSnapshots(t, s)
			a := s.newAgent(t, "/agents", map[string]any{"cwd": repo, "workspace": "snapshot"})
			s.toolCall(t, a.ID, "c_1", "echo one > f.txt")
			afterOne := s.toolCall(t, a.ID, "m_1", manifest)
			s.toolCall(t, a.ID, "c_2", "rm -r src && echo two > new.txt")
			afterTwo := s.toolCall(t, a.ID, "m_2", manifest)
			s.stop(t)

			s = startServer(t, withHome(home), withEnv("DSHD_CRASH_AT="+point))
			if rewind {
				crashOn(t, s, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"callId": "c_2", "to": "before"})
			} else {
				crashOn(t, s, "POST", "/agents/"+a.ID+"/tools/bash", map[string]any{"callId": "c_3", "arguments": map[string]any{"command": "echo three >> f.txt"}})
			}
			s = startServer(t, withHome(home))
			var list checkpointList
			if st := s.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints", nil, &list); st != 200 {
				t.Fatalf("checkpoints = %d", st)
			}
			var calls []string
			for _, c := range list.Checkpoints {
				calls = append(calls, c.CallID)
			}
			got := s.toolCall(t, a.ID, "m_after", manifest)
			switch {
			case rewind && got == afterOne:
				if strings.Join(calls, ",") != "c_1" || !list.Undo {
					t.Errorf("rewound view, checkpoints %v (undo %v)", calls, list.Undo)
				}
			case rewind && got == afterTwo:
				if strings.Join(calls, ",") != "c_1,c_2" {
					t.Errorf("view not rewound, checkpoints %v", calls)
				}
			case rewind:
				t.Errorf("after a crash in a rewind the view is neither before nor after it:\n%s", got)
			default:
				// The call ran before the crash: its change is in the
				// view, checkpointed or pending; before it, c_1 and c_2.
				want := "c_1,c_2"
				if point == "workspace.checkpoint.saved" {
					want = "c_1,c_2,c_3"
				}
				if strings.Join(calls, ",") != want || !strings.Contains(s.toolCall(t, a.ID, "m_f", "cat f.txt"), "one\nthree") {
					t.Errorf("after a crash in a checkpoint: checkpoints %v, pending %v", calls, list.Pending)
				}
			}
			// It goes on: a call checkpoints, a rewind to c_2 works.
			s.toolCall(t, a.ID, "c_4", "echo four > four.txt")
			var rw map[string]any
			if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"callId": "c_1", "to": "after"}, &rw); st != 200 {
				t.Fatalf("rewind after the restart = %d %v", st, rw)
			}
			if got := s.toolCall(t, a.ID, "m_end", manifest); got != afterOne {
				t.Errorf("rewound to after c_1 after the restart:\n got %s\nwant %s", got, afterOne)
			}
		})
	}
}

// TestCheckpointLogCrash: checkpoints are records appended to the
// state's log beside state.json; a later write of the whole state (a
// rewind's) replaces state.json and then empties the log. dshd SIGKILLs
// itself between the two (workspace.state.snapshot, its second time: the
// first is the start's, which writes the log the last run left into
// state.json): the log then still holds records state.json already has,
// and the next start shows the view as the rewind left it, its
// checkpoints agreeing, the rewind undoable; nothing applied twice.
func TestCheckpointLogCrash(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	repo := gitRepo(t)
	home := filepath.Join(t.TempDir(), "home")
	s := startServer(t, withHome(home))
	needSnapshots(t, s)
	a := s.newAgent(t, "/agents", map[string]any{"cwd": repo, "workspace": "snapshot"})
	s.toolCall(t, a.ID, "c_1", "echo one > f.txt")
	s.toolCall(t, a.ID, "c_2", "rm -r src && echo two > new.txt")
	afterTwo := s.toolCall(t, a.ID, "m_2", manifest)
	s.stop(t)
	if fi, err := os.Stat(filepath.Join(home, "workspaces", "state.log")); err != nil || fi.Size() == 0 {
		t.Fatalf("the state's log after two checkpoints: %v %v, want their records", fi, err)
	}

	s = startServer(t, withHome(home), withEnv("DSHD_CRASH_AT=workspace.state.snapshot:2"))
	s.toolCall(t, a.ID, "c_3", "echo three >> f.txt")
	afterThree := s.toolCall(t, a.ID, "m_3", manifest)
	crashOn(t, s, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"callId": "c_3", "to": "before"})

	s = startServer(t, withHome(home))
	var list checkpointList
	if st := s.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints", nil, &list); st != 200 {
		t.Fatalf("checkpoints = %d", st)
	}
	var calls []string
	for _, c := range list.Checkpoints {
		calls = append(calls, c.CallID)
	}
	if strings.Join(calls, ",") != "c_1,c_2" || !list.Undo {
		t.Errorf("after the crash: checkpoints %v (undo %v), want c_1,c_2 and an undo", calls, list.Undo)
	}
	if got := s.toolCall(t, a.ID, "m_after", manifest); got != afterTwo {
		t.Errorf("the view after the crash is not the rewound one:\n got %s\nwant %s", got, afterTwo)
	}
	noStrayLayers(t, home)
	var rw map[string]any
	if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"undo": true}, &rw); st != 200 {
		t.Fatalf("undo after the restart = %d %v", st, rw)
	}
	if got := s.toolCall(t, a.ID, "m_undone", manifest); got != afterThree {
		t.Errorf("the undone view:\n got %s\nwant %s", got, afterThree)
	}
}

// TestCheckpointCompactionCrash: dshd SIGKILLs itself at each crash point
// of a compaction (its merged layer made and still empty, in the middle of
// merging a run of layers, once they are
// merged, once the new stack is recorded); the next start shows the
// agent's view as after its last call, byte for byte, with its checkpoints
// either all individual or the run compacted, never a mixture; every kept
// checkpoint still rewinds to its view (and a compacted one's inside is
// 410 checkpoint_compacted); no layer is left that the record does not
// hold; the agent goes on.
func TestCheckpointCompactionCrash(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	const cfg = "workspaces:\n  checkpointDepth: 2\n"
	for _, point := range []string{"workspace.compact.layer", "workspace.compact.merging", "workspace.compact.merged", "workspace.compact.saved"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			repo := gitRepo(t)
			home := filepath.Join(t.TempDir(), "home")
			base, err := runIn(repo, nil, "sh", "-c", manifest)
			if err != nil {
				t.Fatal(err)
			}
			// Three calls: two kept, not yet a run to merge.
			s := startServer(t, withHome(home), withConfig(cfg))
			needSnapshots(t, s)
			a := s.newAgent(t, "/agents", map[string]any{"cwd": repo, "workspace": "snapshot"})
			var views []string
			for i, c := range []string{"echo one > f.txt && rm -r src", "mkdir -p src && echo new > src/x.go", "chmod 600 f.txt && ln -s f.txt l"} {
				s.toolCall(t, a.ID, fmt.Sprint("c_", i+1), c)
				views = append(views, s.toolCall(t, a.ID, fmt.Sprint("m_", i+1), manifest))
			}
			s.stop(t)

			// The fourth call's checkpoint starts a compaction of the
			// first two; dshd dies in it.
			s = startServer(t, withHome(home), withConfig(cfg), withEnv("DSHD_CRASH_AT="+point))
			// The answer may come before the crash (the compaction runs
			// after it) or not at all.
			req, _ := http.NewRequest("POST", s.URL+"/agents/"+a.ID+"/tools/bash", strings.NewReader(`{"callId":"c_4","arguments":{"command":"echo four >> f.txt && rm l"}}`))
			req.Header.Set("Authorization", "Bearer "+s.Token)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			select {
			case <-s.done:
			case <-time.After(60 * time.Second):
				t.Fatal("no compaction reached the crash point")
			}
			if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("dshd ended with %v, want its crash point's SIGKILL", s.err)
			}

			s = startServer(t, withHome(home), withConfig(cfg))
			afterFour := s.toolCall(t, a.ID, "m_4", manifest)
			if !strings.Contains(afterFour, "f.txt") || strings.Contains(afterFour, " ./l ") {
				t.Fatalf("the view after the fourth call:\n%s", afterFour)
			}
			var list struct {
				Checkpoints []struct {
					CallIDs   []string `json:"callIds"`
					Compacted bool     `json:"compacted"`
				} `json:"checkpoints"`
			}
			if st := s.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints", nil, &list); st != 200 {
				t.Fatalf("checkpoints = %d", st)
			}
			var got []string
			for _, c := range list.Checkpoints {
				got = append(got, fmt.Sprintf("%s%v", map[bool]string{true: "compacted"}[c.Compacted], c.CallIDs))
			}
			compacted := point == "workspace.compact.saved"
			want := "[[c_1] [c_2] [c_3] [c_4]]"
			if compacted {
				want = "[compacted[c_1 c_2] [c_3] [c_4]]"
			}
			if fmt.Sprint(got) != want {
				t.Errorf("checkpoints after the crash: %v, want %s", got, want)
			}
			noStrayLayers(t, home)

			rewind := func(call, to string, want string) {
				t.Helper()
				var rw map[string]any
				if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"callId": call, "to": to}, &rw); st != 200 {
					t.Fatalf("rewind %s %s = %d %v", to, call, st, rw)
				}
				if v := s.toolCall(t, a.ID, "m_"+to+"_"+call, manifest); v != want {
					t.Errorf("%s %s:\n got %s\nwant %s", to, call, v, want)
				}
				if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"undo": true}, &rw); st != 200 {
					t.Fatalf("undo = %d %v", st, rw)
				}
			}
			rewind("c_4", "before", views[2])
			rewind("c_3", "before", views[1])
			rewind("c_1", "before", strings.TrimSuffix(base, "\n"))
			if compacted {
				var p wsProblem
				if st := s.DoJSON(t, "POST", "/agents/"+a.ID+"/rewind", map[string]any{"callId": "c_1", "to": "after"}, &p); st != 410 || p.Code != "checkpoint_compacted" {
					t.Errorf("rewind inside a compacted checkpoint = %d %+v", st, p)
				}
			} else {
				rewind("c_1", "after", views[0])
			}
			if v := s.toolCall(t, a.ID, "m_end", manifest); v != afterFour {
				t.Errorf("the view after the rewinds:\n got %s\nwant %s", v, afterFour)
			}
			// It goes on.
			s.toolCall(t, a.ID, "c_5", "echo five > five.txt")
			if out := s.toolCall(t, a.ID, "m_5", "cat five.txt f.txt"); out != "five\none\nfour" {
				t.Errorf("after another call: %q", out)
			}
		})
	}
}

// noStrayLayers fails t when the workspaces' directory under home holds a
// layer its record does not reference (what a crash left and the start
// did not clean).
func noStrayLayers(t *testing.T, home string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "workspaces", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Agents map[string]struct {
			Layers []string `json:"layers"`
			Upper  string   `json:"upper"`
			Aside  *struct {
				Layers []string `json:"layers"`
			} `json:"aside"`
		} `json:"agents"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, a := range st.Agents {
		for _, l := range a.Layers {
			used[l] = true
		}
		if a.Aside != nil {
			for _, l := range a.Aside.Layers {
				used[l] = true
			}
		}
		used[a.Upper] = true
	}
	ents, err := os.ReadDir(filepath.Join(home, "workspaces", "layers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !used[e.Name()] {
			t.Errorf("layer %s is left on disk, referenced by nothing", e.Name())
		}
	}
}

// TestCheckpointUnderBubblewrap: under bubblewrap a plain tool call's job
// ends with its leader (bwrap) a moment before the rest of its sandbox is
// gone; the call still gets its own checkpoint, never a pending one.
func TestCheckpointUnderBubblewrap(t *testing.T) {
	t.Parallel()
	testenv.NeedRoot(t, "overlayfs mounts and mount namespaces need CAP_SYS_ADMIN")
	repo := gitRepo(t)
	s := startSandboxServer(t, "bubblewrap")
	needSnapshots(t, s)
	a := s.newAgent(t, "/agents", map[string]any{"cwd": repo, "workspace": "snapshot", "sandbox": map[string]any{"policy": "workspace-write"}})
	for i := range 8 {
		s.toolCall(t, a.ID, fmt.Sprint("c_", i), fmt.Sprintf("echo %d > f_%d.txt", i, i))
		var list checkpointList
		if st := s.DoJSON(t, "GET", "/agents/"+a.ID+"/checkpoints", nil, &list); st != 200 {
			t.Fatalf("checkpoints = %d", st)
		}
		if len(list.Checkpoints) != i+1 || len(list.Pending) != 0 || list.Checkpoints[i].CallID != fmt.Sprint("c_", i) {
			t.Fatalf("after call %d: %d checkpoints, pending %v", i, len(list.Checkpoints), list.Pending)
		}
	}
}
