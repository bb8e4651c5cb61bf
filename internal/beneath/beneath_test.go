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
