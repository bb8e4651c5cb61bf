package workspace

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// logged makes n checkpoints of a root snapshot agent "a" over base, each
// call adding f<i>.txt, and closes the Manager: the checkpoints are then
// in the state's log, not in state.json. It returns the checkpoints as
// listed before the close.
func logged(t *testing.T, home, base string, n int) []Checkpoint {
	t.Helper()
	m := open(t, home)
	if err := m.Adopt("a", base); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		put(t, view(t, m, "a"), fmt.Sprintf("f%d.txt", i), fmt.Sprint(i))
		if made, err := m.Checkpoint("a", fmt.Sprint("call_", i), int64(i)); !made || err != nil {
			t.Fatalf("checkpoint %d: %v %v", i, made, err)
		}
	}
	list, err := m.Checkpoints("a")
	if err != nil {
		t.Fatal(err)
	}
	m.WaitCompactions("a") // and the remount, which removes a work directory
	m.Close()
	return list.Checkpoints
}

func logLines(t *testing.T, home string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "workspaces", "state.log"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte("\n"))
}

func callsOf(cs []Checkpoint) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.CallIDs...)
	}
	return out
}

// TestStateLogReplay: checkpoints go to the state's log, one line each,
// not to state.json; the next start applies them (the same checkpoints,
// the same view), writes them into state.json and empties the log.
func TestStateLogReplay(t *testing.T) {
	_, home, base := fixture(t)
	want := logged(t, home, base, 3)
	if n := len(logLines(t, home)) - 1; n != 3 {
		t.Fatalf("the log holds %d lines after 3 checkpoints, want 3", n)
	}
	m := open(t, home)
	list, err := m.Checkpoints("a")
	if err != nil || !slices.EqualFunc(list.Checkpoints, want, func(a, b Checkpoint) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
		t.Fatalf("after the restart: %+v %v\nwant %+v", list.Checkpoints, err, want)
	}
	v := view(t, m, "a")
	for i := range 3 {
		if got := read(t, v, fmt.Sprintf("f%d.txt", i)); got != fmt.Sprint(i) {
			t.Errorf("f%d.txt = %q", i, got)
		}
	}
	if fi, err := os.Stat(filepath.Join(home, "workspaces", "state.log")); err != nil || fi.Size() != 0 {
		t.Errorf("the log after the start: %v %v, want empty", fi, err)
	}
}

// TestStateLogTornTail: a last line cut short (a crash in the middle of
// its write), or one whose checksum fails, ends the replay: the
// checkpoints before it stand; the cut checkpoint's changes are in the
// view, in the upper layer it had not yet frozen; and the layer it had
// made is removed as unused.
func TestStateLogTornTail(t *testing.T) {
	for _, how := range []string{"cut", "checksum"} {
		t.Run(how, func(t *testing.T) {
			_, home, base := fixture(t)
			want := logged(t, home, base, 3)
			lines := logLines(t, home)
			last := lines[2]
			if how == "cut" {
				last = last[:len(last)/2]
			} else {
				last = bytes.Replace(last, []byte("call_2"), []byte("call_X"), 1)
			}
			p := filepath.Join(home, "workspaces", "state.log")
			if err := os.WriteFile(p, slices.Concat(lines[0], lines[1], last), 0o600); err != nil {
				t.Fatal(err)
			}
			m := open(t, home)
			list, _ := m.Checkpoints("a")
			if got := callsOf(list.Checkpoints); !slices.Equal(got, []string{"call_0", "call_1"}) {
				t.Fatalf("checkpoints after a torn last record: %v", got)
			}
			v := view(t, m, "a")
			if got := read(t, v, "f2.txt"); got != "2" {
				t.Errorf("the third call's change: f2.txt = %q", got)
			}
			m.mu.Lock()
			upper := m.agents["a"].Upper
			m.mu.Unlock()
			if upper != want[2].Layer {
				t.Errorf("upper %s, want the layer the torn checkpoint froze, %s", upper, want[2].Layer)
			}
			if ents, _ := os.ReadDir(filepath.Join(home, "workspaces", "layers")); len(ents) != 3 {
				t.Errorf("%d layers after the start, want 3 (two frozen, the upper)", len(ents))
			}
			// It goes on: the next checkpoint holds the third call's
			// change with its own.
			put(t, v, "g.txt", "g")
			if made, err := m.Checkpoint("a", "call_3", 3); !made || err != nil {
				t.Fatalf("checkpoint after the start: %v %v", made, err)
			}
		})
	}
}

// TestStateLogOlderRecords: records state.json already holds (a crash
// between a snapshot and the log's truncation) are skipped by their
// generations, never applied twice.
func TestStateLogOlderRecords(t *testing.T) {
	_, home, base := fixture(t)
	want := logged(t, home, base, 3)
	p := filepath.Join(home, "workspaces", "state.log")
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m := open(t, home) // writes the snapshot, empties the log
	m.Close()
	if err := os.WriteFile(p, old, 0o600); err != nil {
		t.Fatal(err)
	}
	m = open(t, home)
	list, _ := m.Checkpoints("a")
	if got := callsOf(list.Checkpoints); !slices.Equal(got, callsOf(want)) {
		t.Fatalf("checkpoints with the older records left in the log: %v, want %v", got, callsOf(want))
	}
	if v := view(t, m, "a"); read(t, v, "f2.txt") != "2" {
		t.Errorf("f2.txt = %q", read(t, v, "f2.txt"))
	}
}

// TestSpareLayerKept: a checkpoint has the next one's layer made ahead (a
// spare, which no agent references yet); a removal of unused layers at
// runtime (a drop's) leaves it, and the next checkpoint's fresh upper is
// that spare.
func TestSpareLayerKept(t *testing.T) {
	m, home, base := fixture(t)
	for _, a := range []string{"a", "b"} {
		if err := m.Adopt(a, base); err != nil {
			t.Fatal(err)
		}
	}
	put(t, view(t, m, "a"), "x.txt", "x")
	if made, err := m.Checkpoint("a", "call_1", 1); !made || err != nil {
		t.Fatalf("checkpoint: %v %v", made, err)
	}
	m.WaitCompactions("a")
	m.wg.Wait() // the spare made
	m.mu.Lock()
	spare := m.spare
	m.mu.Unlock()
	if spare == "" {
		t.Fatal("no spare layer after a checkpoint")
	}
	if err := m.Drop("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, "workspaces", "layers", spare, "work")); err != nil {
		t.Fatalf("the spare after a drop removed unused layers: %v", err)
	}
	put(t, view(t, m, "a"), "y.txt", "y")
	if made, err := m.Checkpoint("a", "call_2", 2); !made || err != nil {
		t.Fatalf("checkpoint: %v %v", made, err)
	}
	m.mu.Lock()
	upper := m.agents["a"].Upper
	m.mu.Unlock()
	if upper != spare {
		t.Errorf("the upper after the next checkpoint is %s, want the spare %s", upper, spare)
	}
	if v := view(t, m, "a"); read(t, v, "x.txt")+read(t, v, "y.txt") != "xy" {
		t.Errorf("the view: x.txt %q, y.txt %q", read(t, v, "x.txt"), read(t, v, "y.txt"))
	}
}
