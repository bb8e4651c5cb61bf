package files

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dshd/dshd/internal/sandbox"
)

func TestMove(t *testing.T) {
	s, ws, out := scope(t)
	write := func(p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	write(filepath.Join(ws, "a"), "a")
	write(filepath.Join(ws, "b"), "b")
	write(filepath.Join(ws, "repo/.git/config"), "git")
	write(filepath.Join(ws, "tree/f"), "f")
	write(filepath.Join(out, "victim"), "v")
	if err := os.Symlink(out, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s.Token, filepath.Join(ws, "toklink")); err != nil {
		t.Fatal(err)
	}

	// What works.
	if m, err := s.Move("a", "c", false, false); err != nil || m.From != filepath.Join(ws, "a") || m.Path != filepath.Join(ws, "c") || read(filepath.Join(ws, "c")) != "a" {
		t.Fatalf("Move(a, c) = %+v, %v; c holds %q", m, err, read(filepath.Join(ws, "c")))
	}
	if _, err := s.Move("c", "b", false, false); !errors.Is(err, ErrExists) || read(filepath.Join(ws, "b")) != "b" || read(filepath.Join(ws, "c")) != "a" {
		t.Fatalf("Move(c, b) onto an existing b = %v, want ErrExists and both left", err)
	}
	if _, err := s.Move("c", "b", true, false); err != nil || read(filepath.Join(ws, "b")) != "a" {
		t.Fatalf("Move(c, b, overwrite) = %v; b holds %q", err, read(filepath.Join(ws, "b")))
	}
	if _, err := s.Move("b", "new/dir/b", false, false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Move into a missing directory = %v, want ErrNotFound", err)
	}
	if _, err := s.Move("b", "new/dir/b", false, true); err != nil || read(filepath.Join(ws, "new/dir/b")) != "a" {
		t.Fatalf("Move with parents = %v", err)
	}
	// A link moves as the link it is.
	if _, err := s.Move("toklink", "tok2", false, false); err != nil {
		t.Fatalf("Move of a link = %v", err)
	}
	if l, err := os.Readlink(filepath.Join(ws, "tok2")); err != nil || l != s.Token || read(s.Token) != "secret" {
		t.Fatalf("the moved link = %q, %v; the token holds %q", l, err, read(s.Token))
	}
	if _, err := s.Move("tree", "tree/sub", false, false); !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("Move of a directory into itself = %v, want ErrInvalidPath", err)
	}

	// What is refused, and changes nothing.
	for _, c := range []struct {
		name, from, to string
		want           error
	}{
		{"missing", "nothing", "x", ErrNotFound},
		{"into .git", "tree/f", "repo/.git/hooks-f", ErrProtected},
		{"out of .git", "repo/.git/config", "config", ErrProtected},
		{"a tree holding .git", "repo", "repo2", ErrProtected},
		{"out through a link", "link/victim", "stolen", ErrThroughLink},
		{"in through a link", "tree/f", "link/planted", ErrThroughLink},
		{"out of the roots", "tree/f", filepath.Join(out, "abs"), ErrNotWritable},
		{"from outside the roots", filepath.Join(out, "victim"), "stolen", ErrNotWritable},
		{"the token", s.Token, "stolen", ErrHidden},
		{"into the home", "tree/f", filepath.Join(s.Home, "planted"), ErrHidden},
		{"a root itself", "", "elsewhere", ErrInvalidPath},
		{"..", "tree/f", "../out/x", ErrInvalidPath},
	} {
		if _, err := s.Move(c.from, c.to, true, true); !errors.Is(err, c.want) {
			t.Errorf("%s: Move(%q, %q) = %v, want %v", c.name, c.from, c.to, err, c.want)
		}
	}
	if read(filepath.Join(ws, "tree/f")) != "f" || read(filepath.Join(out, "victim")) != "v" || read(filepath.Join(ws, "repo/.git/config")) != "git" || read(s.Token) != "secret" {
		t.Error("a refused move changed something")
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 {
		t.Errorf("something landed outside: %v", ents)
	}
	if ents, _ := os.ReadDir(s.Home); len(ents) != 1 {
		t.Errorf("something landed in the home: %v", ents)
	}

	// Unrestricted: out of the workspace works, the home's parent does
	// not move, nor is it removed.
	free := *s
	free.FS = sandbox.Unrestricted
	if _, err := free.Move("tree/f", filepath.Join(out, "f"), false, false); err != nil || read(filepath.Join(out, "f")) != "f" {
		t.Fatalf("unrestricted Move out of the workspace = %v", err)
	}
	if _, err := free.Move(filepath.Dir(s.Home), filepath.Dir(s.Home)+".moved", false, false); !errors.Is(err, ErrHidden) {
		t.Errorf("unrestricted Move of the home's parent = %v, want ErrHidden", err)
	}
	if _, err := free.Remove(filepath.Dir(s.Home), true); !errors.Is(err, ErrHidden) {
		t.Errorf("unrestricted recursive Remove of the home's parent = %v, want ErrHidden", err)
	}
	if read(s.Token) != "secret" {
		t.Error("the token is gone")
	}
	// The agent's cwd, and a directory holding it, are neither moved nor
	// removed, whatever the policy.
	for _, p := range []string{ws, filepath.Dir(ws)} {
		if _, err := free.Move(p, p+".moved", false, false); !errors.Is(err, ErrInvalidPath) && !errors.Is(err, ErrHidden) {
			t.Errorf("unrestricted Move of %s (the cwd or above) = %v, want a refusal", p, err)
		}
		if _, err := free.Remove(p, true); !errors.Is(err, ErrInvalidPath) && !errors.Is(err, ErrHidden) {
			t.Errorf("unrestricted recursive Remove of %s (the cwd or above) = %v, want a refusal", p, err)
		}
	}
	if _, err := free.Move(ws, ws+".moved", false, false); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("unrestricted Move of the cwd = %v, want ErrInvalidPath", err)
	}
	if _, err := free.Remove(ws, true); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("unrestricted recursive Remove of the cwd = %v, want ErrInvalidPath", err)
	}
	if _, err := os.Stat(ws); err != nil {
		t.Errorf("the cwd: %v", err)
	}
	ro := *s
	ro.FS = sandbox.ReadOnly
	if _, err := ro.Move("new/dir/b", "b", false, false); !errors.Is(err, ErrNotWritable) {
		t.Errorf("read-only Move = %v, want ErrNotWritable", err)
	}
}

// TestWriteThroughALinkedRoot: a writable root given as a link's path is
// judged where it leads: a cwd that is a link to the home's parent does
// not make the home writable.
func TestWriteThroughALinkedRoot(t *testing.T) {
	s, ws, _ := scope(t)
	link := filepath.Join(ws, "base")
	if err := os.Symlink(filepath.Dir(s.Home), link); err != nil {
		t.Fatal(err)
	}
	s.Cwd = link
	if _, err := s.Move("home/server.token", "stolen", false, false); !errors.Is(err, ErrHidden) {
		t.Errorf("Move of the token through a linked cwd = %v, want ErrHidden", err)
	}
	if _, err := s.Remove("home/server.token", false); !errors.Is(err, ErrHidden) {
		t.Errorf("Remove of the token through a linked cwd = %v, want ErrHidden", err)
	}
}
