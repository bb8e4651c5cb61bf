package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoLinkFollowed: a link inside the directory, to a directory outside,
// is neither opened through nor emptied by a removal; the link itself goes.
func TestNoLinkFollowed(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "keep"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tree", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out, filepath.Join(dir, "tree", "sub", "link")); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	if fd, err := Openat2(dfd, "tree/sub/link/keep", unix.O_RDONLY, 0, Resolve); !errors.Is(err, unix.ELOOP) {
		unix.Close(fd)
		t.Errorf("open through the link = %v, want ELOOP", err)
	}
	if fd, err := Openat2(dfd, "../"+filepath.Base(out), unix.O_RDONLY, 0, Resolve); !errors.Is(err, unix.EXDEV) {
		unix.Close(fd)
		t.Errorf("open of .. = %v, want EXDEV", err)
	}
	if names, err := Names(dfd); err != nil || len(names) != 1 || names[0] != "tree" {
		t.Errorf("Names = %v, %v", names, err)
	}
	if err := RemoveAllAt(dfd, "tree"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "tree")); !os.IsNotExist(err) {
		t.Errorf("tree is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "keep")); err != nil {
		t.Errorf("the removal went through the link: %v", err)
	}
}

// TestWithin: the one containment check of names (the sandbox's plan, the
// workspaces and the file routes use it): a sibling sharing a prefix, a
// .. leading out and a name that only starts with .. are told apart.
func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		p, dir string
		want   bool
	}{
		{"/a", "/a", true},
		{"/a/b", "/a", true},
		{"/a/b/c", "/a", true},
		{"/a/", "/a", true},
		{"/a/b/../c", "/a", true},
		{"/a/..b", "/a", true},
		{"/x", "/", true},
		{"/", "/", true},
		{"/ab", "/a", false},
		{"/a", "/a/b", false},
		{"/a/../b", "/a", false},
		{"/a/b/../../c", "/a", false},
		{"/", "/a", false},
		{"a/b", "/a", false},
		{"/a/b", "a", false},
	} {
		if got := Within(tc.p, tc.dir); got != tc.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tc.p, tc.dir, got, tc.want)
		}
	}
}
