//go:build linux

package exec

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// winsize is a terminal's size in character cells.
type winsize struct{ cols, rows uint16 }

// openPTY opens a new pseudo-terminal of size ws. The slave is the child's
// (blocking, as programs expect); the master is returned non-blocking and
// in the runtime poller, so its reads and writes honour deadlines like our
// pipe ends. creack/pty opens the pair; its ioctls go through File.Fd,
// which switches a file to blocking mode, so the master we keep is a
// duplicate registered afresh, and later ioctls on it (resize) go through
// SyscallConn.
func openPTY(ws winsize) (master, slave *os.File, err error) {
	m, t, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	defer m.Close()
	if err := pty.Setsize(t, &pty.Winsize{Cols: ws.cols, Rows: ws.rows}); err != nil {
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
func setWinsize(f *os.File, ws winsize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: ws.cols, Row: ws.rows})
	}); err != nil {
		return err
	}
	return ierr
}

// eofChar is what CloseInput writes to a terminal: VEOF, ^D, which ends a
// read at the start of a line the way closing a pipe does. A terminal has
// no stdin of its own to close.
const eofChar = 0x04

// errInputNotOpen, errInputEnded: why writeInput wrote nothing; the
// executor wraps them in its sentinels with the job's id.
var (
	errInputNotOpen = errors.New("no input open")
	errInputEnded   = errors.New("job ended")
)

// writeInput writes b to p's interactive input, waiting at most until
// deadline for the program to take it (one writer at a time; later writers
// wait their turn within their own deadline). It returns how many bytes
// were taken: all of them, or fewer with ErrInputBlocked when the deadline
// passed first. errInputEnded: the job's leader has exited, whatever the
// job's input was; errInputNotOpen: p is running and has no interactive
// input, or it was closed.
func (p *proc) writeInput(b []byte, deadline time.Time) (int, error) {
	p.mu.Lock()
	f, ended, closed := p.in, p.exited, p.inClosed
	p.mu.Unlock()
	switch {
	case ended:
		return 0, errInputEnded
	case f == nil:
		return 0, errInputNotOpen
	case closed:
		return 0, errInputNotOpen
	}
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case p.inSem <- struct{}{}:
	case <-wait.C:
		return 0, ErrInputBlocked
	case <-p.done:
		return 0, errInputEnded
	}
	defer func() { <-p.inSem }()
	p.mu.Lock()
	ended, closed = p.exited, p.inClosed
	p.mu.Unlock()
	if ended {
		return 0, errInputEnded
	}
	if closed {
		return 0, errInputNotOpen
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
		return n, errInputEnded
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, ErrInputBlocked
	}
	return n, err
}

// closeInput closes p's interactive input: the pipe's write end, so the
// program reads end-of-file once it has read what was written; for a
// terminal, it writes ^D (eofChar) and the terminal stays open. It waits
// for a writer in progress, at most until deadline.
func (p *proc) closeInput(deadline time.Time) error {
	p.mu.Lock()
	f, tty, ended := p.in, p.inTTY, p.exited
	p.mu.Unlock()
	switch {
	case ended:
		return errInputEnded
	case f == nil:
		return errInputNotOpen
	}
	if tty {
		_, err := p.writeInput([]byte{eofChar}, deadline)
		return err
	}
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case p.inSem <- struct{}{}:
	case <-wait.C:
		return ErrInputBlocked
	case <-p.done:
		return errInputEnded
	}
	defer func() { <-p.inSem }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return errInputEnded
	}
	if p.inClosed {
		return errInputNotOpen
	}
	p.inClosed = true
	return f.Close()
}

// resize sets the size of p's terminal. errInputEnded: the job ended,
// with or without a terminal; errInputNotOpen: p is running and has no
// terminal.
func (p *proc) resize(ws winsize) error {
	p.mu.Lock()
	f, tty, ended := p.in, p.inTTY, p.exited
	p.mu.Unlock()
	switch {
	case ended:
		return errInputEnded
	case !tty:
		return errInputNotOpen
	}
	if err := setWinsize(f, ws); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return errInputEnded
		}
		return fmt.Errorf("resize terminal: %w", err)
	}
	return nil
}

// signalGroupNow sends sig to p's process group, as a terminal sends ^C to
// its foreground group. errInputEnded: the leader has exited.
func (p *proc) signalGroupNow(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pid == 0 || p.exited {
		return errInputEnded
	}
	// The pid names our group while any member lives (a reaped leader's
	// pid stays reserved as a pgid until then), as on the kill path.
	err := syscall.Kill(-p.pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return errInputEnded
	}
	return err
}
