package proc

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaper makes dshd the child subreaper of its jobs' descendants and reaps
// the ones it adopts. Being a subreaper is a property of the whole process
// (prctl PR_SET_CHILD_SUBREAPER), so there is one reaper per process,
// shared by every Executor in it.
//
// Zombies of the processes dshd spawned itself are reaped by their own
// waiters, which need the exit status; the reaper must leave them alone. A
// spawn holds mu for reading from before the fork until its pid is in
// leaders, and a reaper pass holds it for writing, so every zombie the
// reaper sees is either a registered leader or an adopted process.
type reaper struct {
	mu      sync.RWMutex
	leaders sync.Map // pid -> struct{}: spawned by dshd, reaped by their waiter
	once    sync.Once
	err     error
	active  bool
}

// reaperOf is the process's reaper (see reaper).
var reaperOf reaper

// reapDebounce gathers a burst of SIGCHLDs into one pass over /proc.
const reapDebounce = 20 * time.Millisecond

// startSubreaper turns the process into a child subreaper and starts the
// reaping goroutine, once.
func startSubreaper() error {
	r := &reaperOf
	r.once.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			r.err = os.NewSyscallError("prctl PR_SET_CHILD_SUBREAPER", err)
			return
		}
		r.mu.Lock()
		r.active = true
		r.mu.Unlock()
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		go func() {
			for range ch {
				time.Sleep(reapDebounce)
				r.reapAdopted()
			}
		}()
	})
	return r.err
}

// spawning is held around a spawn; registered records the leader's pid
// before it is released.
func (r *reaper) spawning() func(pid int) {
	r.mu.RLock()
	return func(pid int) {
		if pid > 0 {
			r.leaders.Store(pid, struct{}{})
		}
		r.mu.RUnlock()
	}
}

// reaped forgets a leader once its waiter has reaped it.
func (r *reaper) reaped(pid int) { r.leaders.Delete(pid) }

func (r *reaper) isLeader(pid int) bool {
	_, ok := r.leaders.Load(pid)
	return ok
}

// reapAdopted reaps every zombie child of dshd that is not a leader.
func (r *reaper) reapAdopted() {
	r.mu.Lock()
	defer r.mu.Unlock()
	self := os.Getpid()
	for _, st := range ScanProcs() {
		if st.ppid != self || st.state != 'Z' || r.isLeader(st.pid) {
			continue
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(st.pid, &ws, syscall.WNOHANG, nil)
	}
}
