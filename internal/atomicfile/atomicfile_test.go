package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	var synced []string
	o := Options{Perm: 0o640, Sync: func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		synced = append(synced, filepath.Base(f.Name())+map[bool]string{true: "/", false: ""}[fi.IsDir()])
		return f.Sync()
	}}
	if err := Write(path, []byte("one"), o); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two"), o); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "two" {
		t.Fatalf("contents = %q, %v; want two", b, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want 0640", fi.Mode().Perm())
	}
	// Each write syncs its temporary file, then the directory.
	if len(synced) != 4 || synced[1] != filepath.Base(dir)+"/" || synced[3] != filepath.Base(dir)+"/" {
		t.Errorf("synced = %q, want file, dir, file, dir", synced)
	}
	if m, _ := filepath.Match(TempPattern(path), synced[0]); !m {
		t.Errorf("temporary file %q does not match %q", synced[0], TempPattern(path))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file", len(entries))
	}
}

func TestWriteFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := Write(path, []byte("old"), Options{}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk on fire")
	if err := Write(path, []byte("new"), Options{Sync: func(*os.File) error { return boom }}); !errors.Is(err, boom) {
		t.Fatalf("Write with failing fsync = %v, want it", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("contents after a failed write = %q, want old", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("default mode = %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("a failed write left %d entries, want only the file", len(entries))
	}
}

func TestWriteReplacesALinkNotItsTarget(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "link")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), Options{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	if fi, _ := os.Lstat(path); fi.Mode()&fs.ModeSymlink != 0 {
		t.Error("path is still a link")
	}
}
