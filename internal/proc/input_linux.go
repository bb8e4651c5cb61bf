//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Winsize is a terminal's size in character cells.
type Winsize struct{ Cols, Rows uint16 }

// openPTY opens a new pseudo-terminal of size ws. The slave is the child's
// (blocking, as programs expect); the master is returned non-blocking and
// in the runtime poller, so its reads and writes honour deadlines like our
// pipe ends. creack/pty opens the pair; its ioctls go through File.Fd,
// which switches a file to blocking mode, so the master we keep is a
// duplicate registered afresh, and later ioctls on it (resize) go through
// SyscallConn.
func openPTY(ws Winsize) (master, slave *os.File, err error) {
	m, t, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	defer m.Close()
	if err := pty.Setsize(t, &pty.Winsize{Cols: ws.Cols, Rows: ws.Rows}); err != nil {
		t.Close()
		return nil, nil, fmt.Errorf("size pty: %w", err)
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Close()
		return nil, nil, os.NewSyscallError("dup pty master", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		t.Close()
		return nil, nil, os.NewSyscallError("setnonblock", err)
	}
	// os.NewFile puts a non-blocking descriptor in the poller.
	return os.NewFile(uintptr(fd), "ptmx"), t, nil
}

// setWinsize sets the size of the terminal whose master is f; the kernel
// sends SIGWINCH to the terminal's foreground process group.
func setWinsize(f *os.File, ws Winsize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: ws.Cols, Row: ws.Rows})
	}); err != nil {
		return err
	}
	return ierr
}

// eofChar is what CloseInput writes to a terminal: VEOF, ^D, which ends a
// read at the start of a line the way closing a pipe does. A terminal has
// no stdin of its own to close.
const eofChar = 0x04

// ErrNoInput, ErrEnded: why writeInput wrote nothing; the
// executor wraps them in its sentinels with the job's id.
var (
	ErrNoInput = errors.New("no input open")
	ErrEnded   = errors.New("job ended")
)

// WriteInput writes b to p's interactive input, waiting at most until
// deadline for the program to take it (one writer at a time; later writers
// wait their turn within their own deadline). It returns how many bytes
// were taken: all of them, or fewer with ErrInputBlocked when the deadline
// passed first. ErrEnded: the job's leader has exited, whatever the
// job's input was; ErrNoInput: p is running and has no interactive
// input, or it was closed.
func (p *Process) WriteInput(b []byte, deadline time.Time) (int, error) {
	p.mu.Lock()
	f, ended, closed := p.in, p.exited, p.inClosed
	p.mu.Unlock()
	switch {
	case ended:
		return 0, ErrEnded
	case f == nil:
		return 0, ErrNoInput
	case closed:
		return 0, ErrNoInput
	}
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case p.inSem <- struct{}{}:
	case <-wait.C:
		return 0, ErrInputBlocked
	case <-p.done:
		return 0, ErrEnded
	}
	defer func() { <-p.inSem }()
	p.mu.Lock()
	ended, closed = p.exited, p.inClosed
	p.mu.Unlock()
	if ended {
		return 0, ErrEnded
	}
	if closed {
		return 0, ErrNoInput
	}
	if len(b) == 0 {
		return 0, nil
	}
	_ = f.SetWriteDeadline(deadline)
	n, err := f.Write(b)
	if err == nil {
		return n, nil
	}
	p.mu.Lock()
	ended = p.exited
	p.mu.Unlock()
	switch {
	case ended || errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.EIO):
		return n, ErrEnded
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, ErrInputBlocked
	}
	return n, err
}

// CloseInput closes p's interactive input: the pipe's write end, so the
// program reads end-of-file once it has read what was written; for a
// terminal, it writes ^D (eofChar) and the terminal stays open. It waits
// for a writer in progress, at most until deadline.
func (p *Process) CloseInput(deadline time.Time) error {
	p.mu.Lock()
	f, tty, ended := p.in, p.inTTY, p.exited
	p.mu.Unlock()
	switch {
	case ended:
		return ErrEnded
	case f == nil:
		return ErrNoInput
	}
	if tty {
		_, err := p.WriteInput([]byte{eofChar}, deadline)
		return err
	}
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case p.inSem <- struct{}{}:
	case <-wait.C:
		return ErrInputBlocked
	case <-p.done:
		return ErrEnded
	}
	defer func() { <-p.inSem }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return ErrEnded
	}
	if p.inClosed {
		return ErrNoInput
	}
	p.inClosed = true
	return f.Close()
}

// Resize sets the size of p's terminal. ErrEnded: the job ended,
// with or without a terminal; ErrNoInput: p is running and has no
// terminal.
func (p *Process) Resize(ws Winsize) error {
	p.mu.Lock()
	f, tty, ended := p.in, p.inTTY, p.exited
	p.mu.Unlock()
	switch {
	case ended:
		return ErrEnded
	case !tty:
		return ErrNoInput
	}
	if err := setWinsize(f, ws); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return ErrEnded
		}
		return fmt.Errorf("resize terminal: %w", err)
	}
	return nil
}

// SignalGroupNow sends sig to p's process group, as a terminal sends ^C to
// its foreground group. ErrEnded: the leader has exited.
func (p *Process) SignalGroupNow(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 || p.exited {
		return ErrEnded
	}
	// The pid names our group while any member lives (a reaped leader's
	// pid stays reserved as a pgid until then), as on the kill path.
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return ErrEnded
	}
	return err
}
