package files

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// next waits for the events after *seq until one matches want (type and
// path, "renamed from>to" for a rename), and fails with what it saw.
func next(t *testing.T, w *Watch, seq *uint64, want string) {
	t.Helper()
	var seen []string
	deadline := time.After(10 * time.Second)
	for {
		evs, _, changed, ended := w.Since(*seq, 100)
		for _, e := range evs {
			*seq = e.Seq
			got := e.Type + " " + e.Path
			if e.Type == Renamed {
				got = e.Type + " " + e.From + ">" + e.Path
			}
			if got == want {
				return
			}
			seen = append(seen, got)
		}
		if ended {
			t.Fatalf("the watch ended without %q; saw %q", want, seen)
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no %q within 10s; saw %q", want, seen)
		}
	}
}

func TestWatch(t *testing.T) {
	s, ws, out := scope(t)
	if err := os.Symlink(out, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	open := func() (*Scope, func(), error) { return s, func() {}, nil }
	w, err := s.Watch("", true, open)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var seq uint64
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(ws, "a"), []byte("a"), 0o644))
	next(t, w, &seq, "created a")
	next(t, w, &seq, "modified a")
	must(os.MkdirAll(filepath.Join(ws, "d/e"), 0o755))
	next(t, w, &seq, "created d")
	must(os.WriteFile(filepath.Join(ws, "d/e/f"), []byte("f"), 0o644))
	next(t, w, &seq, "created d/e/f")
	must(os.Rename(filepath.Join(ws, "d"), filepath.Join(ws, "d2")))
	next(t, w, &seq, "renamed d>d2")
	// The moved directory's watches follow its new name.
	must(os.WriteFile(filepath.Join(ws, "d2/e/g"), []byte("g"), 0o644))
	next(t, w, &seq, "created d2/e/g")
	must(os.Rename(filepath.Join(ws, "d2"), filepath.Join(out, "gone")))
	next(t, w, &seq, "deleted d2")
	must(os.Remove(filepath.Join(ws, "a")))
	next(t, w, &seq, "deleted a")
	// An upload is one modified event: its temporary file is left out.
	if _, err := s.Put("up", strings.NewReader("u"), 0, false); err != nil {
		t.Fatal(err)
	}
	next(t, w, &seq, "modified up")
	// Changes through the link, outside, are not the watch's: the marker
	// written after them comes first.
	must(os.WriteFile(filepath.Join(out, "outside"), []byte("o"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "marker"), nil, 0o644))
	evs, _, _, _ := w.Since(seq, 100)
	for _, e := range evs {
		if strings.Contains(e.Path, "outside") || strings.Contains(e.Path, "gone") {
			t.Errorf("an event from outside: %+v", e)
		}
	}
	next(t, w, &seq, "created marker")
	// A moved-out directory is not watched any more.
	must(os.WriteFile(filepath.Join(out, "gone/e/h"), nil, 0o644))
	must(os.WriteFile(filepath.Join(ws, "marker2"), nil, 0o644))
	evs, _, _, _ = w.Since(seq, 100)
	for _, e := range evs {
		if strings.HasSuffix(e.Path, "/h") {
			t.Errorf("an event of a directory moved out: %+v", e)
		}
	}
	next(t, w, &seq, "created marker2")

	// The root removed: a last event, and the watch ends.
	must(os.RemoveAll(ws))
	next(t, w, &seq, "deleted .")
	if _, _, _, ended := w.Since(seq, 100); !ended {
		t.Error("the watch goes on after its directory was removed")
	}
}

func TestWatchRefused(t *testing.T) {
	s, ws, _ := scope(t)
	if err := os.Symlink(s.Home, filepath.Join(ws, "home")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	open := func() (*Scope, func(), error) { return s, func() {}, nil }
	for p, want := range map[string]error{s.Home: ErrHidden, "home": ErrHidden, "/proc": ErrHidden, "/proc/self": ErrHidden, "f": ErrNotDir, "nothing": ErrNotFound, "../x": ErrInvalidPath} {
		if w, err := s.Watch(p, true, open); !errors.Is(err, want) {
			if w != nil {
				w.Close()
			}
			t.Errorf("Watch(%q) = %v, want %v", p, err, want)
		}
	}
	// A watch of the home's parent leaves the home out.
	w, err := s.Watch(filepath.Dir(s.Home), true, open)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var seq uint64
	if err := os.WriteFile(filepath.Join(s.Home, "secret-name"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	evs, _, _, _ := w.Since(seq, 100)
	for _, e := range evs {
		if strings.HasPrefix(e.Path, "home") {
			t.Errorf("an event of the home: %+v", e)
		}
	}
	next(t, w, &seq, "created ws/marker")
}

// TestWatchRing: a client behind the ring is told (lost), and goes on
// from the oldest event kept; the ring does not grow.
func TestWatchRing(t *testing.T) {
	s, ws, _ := scope(t)
	w, err := s.Watch("", false, func() (*Scope, func(), error) { return s, func() {}, nil })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	n := WatchRing + 100
	for i := range n {
		if err := os.WriteFile(filepath.Join(ws, fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var seq uint64
	next(t, w, &seq, fmt.Sprintf("modified %d", n-1))
	evs, lost, _, _ := w.Since(0, 10)
	if !lost || len(evs) == 0 || evs[0].Seq != w.Last()-WatchRing+1 {
		t.Errorf("Since(0) = lost %v, first %+v; want lost, first %d", lost, evs, w.Last()-WatchRing+1)
	}
	if _, lost, _, _ := w.Since(w.Last()-10, 10); lost {
		t.Error("a recent position is lost")
	}
	if len(w.ring) != WatchRing {
		t.Errorf("the ring holds %d events, want %d", len(w.ring), WatchRing)
	}
}

func TestWatches(t *testing.T) {
	s, _, _ := scope(t)
	ws := NewWatches(time.Hour)
	defer ws.Close()
	mk := func() (*Watch, error) {
		return s.Watch("", false, func() (*Scope, func(), error) { return s, func() {}, nil })
	}
	a, leaveA, err := ws.Open("k", mk)
	if err != nil {
		t.Fatal(err)
	}
	b, leaveB, err := ws.Open("k", mk)
	if err != nil {
		t.Fatal(err)
	}
	if a != b || ws.Len() != 1 {
		t.Fatalf("two clients of one key have two watches (%d kept)", ws.Len())
	}
	leaveA()
	leaveB()
	// Kept for linger: a client resumes it, with its key only.
	if _, _, ok := ws.Resume(a.ID, "other"); ok {
		t.Error("a watch resumed under another key")
	}
	r, leave, ok := ws.Resume(a.ID, "k")
	if !ok || r != a {
		t.Fatal("the watch is not kept after its clients left")
	}
	leave()
	ws.Close()
	if ws.Len() != 0 {
		t.Error("Close kept watches")
	}
}

// TestWatchLimit: a host out of inotify instances refuses a watch with
// ErrWatchLimit (503 watch_limit), not a generic error. The limit is made
// real without touching the host's: the test runs again in a user
// namespace of its own, whose inotify instances the kernel counts and
// bounds apart (/proc/sys/user/max_inotify_instances), and there a watch
// starts (the baseline), the limit is set to what is in use, and the next
// watch is refused.
func TestWatchLimit(t *testing.T) {
	if os.Getenv("DSH_TEST_WATCH_LIMIT") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWatchLimit$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "DSH_TEST_WATCH_LIMIT=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		}
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(err.Error(), "operation not permitted") {
			t.Skipf("no user namespaces here: %v", err)
		}
		if i := strings.Index(string(out), "--- SKIP: TestWatchLimit"); err == nil && i >= 0 {
			t.Skip(string(out[i:]))
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestWatchLimit") {
			t.Fatalf("in a user namespace of its own: %v\n%s", err, out)
		}
		return
	}
	s, ws, _ := scope(t)
	open := func() (*Scope, func(), error) { return s, func() {}, nil }
	w, err := s.Watch(ws, true, open)
	if err != nil {
		t.Fatalf("the baseline watch: %v", err)
	}
	defer w.Close()
	if err := os.WriteFile("/proc/sys/user/max_inotify_instances", []byte("1"), 0); err != nil {
		t.Skipf("this kernel bounds no user namespace's inotify instances: %v", err)
	}
	w2, err := s.Watch(ws, false, open)
	if err == nil {
		w2.Close()
		t.Fatal("a watch started past the host's inotify instances")
	}
	if !errors.Is(err, ErrWatchLimit) {
		t.Fatalf("Watch past the limit = %v, want ErrWatchLimit", err)
	}
}
