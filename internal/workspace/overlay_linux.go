package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountOverlay makes a detached overlay mount (fsopen, fsconfig, fsmount)
// of lowers (top first) under upper, with overlayfs's work directory work;
// with upper "" a read-only view of the lowers alone. Nothing is mounted in
// any namespace: the descriptor is the mount, and jobs clone it into their
// own namespaces (see package sandbox). Close it with closeFD.
func mountOverlay(lowers []string, upper, work string) (int, error) {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fd)
	set := func(k, v string) error {
		if err := unix.FsconfigSetString(fd, k, v); err != nil {
			return fmt.Errorf("overlay %s=%s: %w%s", k, v, err, fsLog(fd))
		}
		return nil
	}
	for _, l := range lowers {
		if err := set("lowerdir+", l); err != nil {
			return -1, err
		}
	}
	var attr int
	if upper != "" {
		if err := set("upperdir", upper); err != nil {
			return -1, err
		}
		if err := set("workdir", work); err != nil {
			return -1, err
		}
		// Every file of an upper layer is whole (no metadata-only copy),
		// and renaming a lower directory copies it (no redirect): a layer
		// means the same read alone as under the overlay, which Changes
		// and Apply rely on.
		for _, o := range []string{"redirect_dir=off", "metacopy=off"} {
			k, v, _ := strings.Cut(o, "=")
			if err := set(k, v); err != nil {
				return -1, err
			}
		}
	} else {
		attr = unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.FsconfigCreate(fd); err != nil {
		return -1, fmt.Errorf("create overlay: %w%s", err, fsLog(fd))
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, attr)
	if err != nil {
		return -1, fmt.Errorf("fsmount overlay: %w", err)
	}
	return mfd, nil
}

// fsLog reads the kernel's messages on an fs context (why a mount failed).
func fsLog(fd int) string {
	var out string
	buf := make([]byte, 1024)
	for range 8 {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		out += ": " + string(buf[:n])
	}
	return out
}

func closeFD(fd int) { unix.Close(fd) }

// dupFD is a second descriptor of fd's file, closed on exec.
func dupFD(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

// viewPath is a path dshd itself can read and write the view at, through
// the mount's descriptor (no namespace needed).
func viewPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// probe checks that this host can do all a snapshot needs, with dir (the
// workspaces directory, where uppers live) as the upper file system: a
// detached overlay with two lowers, mounted in a new mount namespace of
// its own on a locked thread.
func probe(dir string) error {
	tmp, err := os.MkdirTemp(dir, ".probe-")
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, d := range []string{"base", "l1", "up", "work", "target"} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "base", "f"), []byte("base"), 0o644); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	fd, err := mountOverlay([]string{filepath.Join(tmp, "l1"), filepath.Join(tmp, "base")}, filepath.Join(tmp, "up"), filepath.Join(tmp, "work"))
	if err != nil {
		return fmt.Errorf("overlayfs with the upper layer under %s: %w", dir, err)
	}
	defer closeFD(fd)
	// A whiteout needs a character device 0/0 on the upper file system.
	if err := os.Remove(filepath.Join(viewPath(fd), "f")); err != nil {
		return fmt.Errorf("overlayfs whiteout under %s: %w", dir, err)
	}
	if err := onThrowawayThread(func() error { return attach(fd, filepath.Join(tmp, "target")) }); err != nil {
		return fmt.Errorf("mount namespace: %w", err)
	}
	return nil
}

// onThrowawayThread runs f on an OS thread of its own that is never given
// back to the scheduler (its goroutine ends locked to it, so the runtime
// terminates it): f may change the thread's namespaces. Never on the main
// thread, which the runtime cannot terminate: a goroutine that finds
// itself there holds it while another one runs f.
func onThrowawayThread(f func() error) error {
	errc := make(chan error, 1)
	var run func()
	run = func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Hold the main thread until f has run elsewhere.
			done := make(chan struct{})
			go func() {
				defer close(done)
				run()
			}()
			<-done
			runtime.UnlockOSThread()
			return
		}
		errc <- f()
	}
	go run()
	return <-errc
}

// attach enters a new mount namespace on the calling (locked, not main)
// thread and mounts a clone of the detached mount fd at target there.
func attach(fd int, target string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave: %w", err)
	}
	c, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(c)
	if err := unix.MoveMount(c, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", target, err)
	}
	return nil
}
