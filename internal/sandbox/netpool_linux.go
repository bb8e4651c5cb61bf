package sandbox

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Network namespaces made ahead. A command with the network off gets a
// network namespace of its own, loopback up. Making one (unshare
// CLONE_NEWNET) takes the kernel some 0.4 ms, which the command would wait
// for; so a few are made ahead on a thread of their own, each used by one
// command only, never shared and never reused: the thread that confines a
// command joins a fresh one (setns) instead of making it. A namespace that
// nothing has joined holds no process and no socket: loopback is all it
// has. When none is ready (the first commands, a burst) or joining fails,
// the command makes its own, as before.

// netNSWanted is how many namespaces are kept ready.
const netNSWanted = 4

// netNamespaces are the namespaces made ahead, for every Host of the
// process (a namespace belongs to no Host).
var netNamespaces netPool

type netPool struct {
	mu      sync.Mutex
	ready   []int // descriptors of fresh namespaces (/proc/thread-self/ns/net)
	filling bool
	broken  bool // a namespace could not be made: this host gives none ahead
	taken   int  // namespaces joined, for tests
}

// join moves the calling thread, locked to its goroutine and about to be
// confined, into a fresh namespace made ahead, and reports whether it did.
// Either way it has more made.
func (p *netPool) join() bool {
	p.mu.Lock()
	fd := -1
	if n := len(p.ready); n > 0 {
		fd = p.ready[n-1]
		p.ready = p.ready[:n-1]
	}
	p.refillLocked()
	p.mu.Unlock()
	if fd < 0 {
		return false
	}
	err := unix.Setns(fd, unix.CLONE_NEWNET)
	unix.Close(fd)
	if err != nil {
		return false
	}
	p.mu.Lock()
	p.taken++
	p.mu.Unlock()
	return true
}

func (p *netPool) refillLocked() {
	if !p.filling && !p.broken && len(p.ready) < netNSWanted {
		p.filling = true
		go p.fill()
	}
}

// fill makes namespaces until netNSWanted are ready, each on this
// goroutine's thread, which is locked and never unlocked: it is in the
// last namespace it made, and dies with the goroutine.
func (p *netPool) fill() {
	defer func() {
		p.mu.Lock()
		p.filling = false
		p.mu.Unlock()
	}()
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// Never the main thread; untouched, it goes back (a goroutine
		// ending locked to it would wedge it), and the next join tries
		// again.
		runtime.UnlockOSThread()
		return
	}
	for {
		p.mu.Lock()
		enough := len(p.ready) >= netNSWanted
		p.mu.Unlock()
		if enough {
			return
		}
		fd, err := newNetNS()
		p.mu.Lock()
		if err != nil {
			p.broken = true
		} else {
			p.ready = append(p.ready, fd)
		}
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// newNetNS moves the calling thread into a new network namespace, brings
// its loopback up, and returns a descriptor that keeps it.
func newNetNS() (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return -1, err
	}
	if err := loopbackUp(); err != nil {
		return -1, err
	}
	return unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
}
