package exec

import (
	"os"
	"sync"
)

// Output pipes made ahead. A command's stdout and stderr are two pipes,
// each a pipe2, its flags set and both ends made *os.File (our read end
// placed in the runtime's poller): a dozen system calls and some twenty
// microseconds a foreground command waited for before it could start. The
// runner keeps a few pairs ready, made on a goroutine of its own after a
// spawn, as the spare job groups are (spares_linux.go). A pair holds nothing
// but four close-on-exec descriptors, is handed to one command only, and
// is closed with the runner; without one ready, a command makes its own.

// pipesWanted is how many pairs are kept ready: enough for a burst of
// concurrent requests while the filler makes more.
const pipesWanted = 4

// outPipes are a command's stdout and stderr: our read ends (non-blocking,
// in the poller) and the child's write ends (blocking).
type outPipes struct {
	outR, outW, errR, errW *os.File
}

func newOutPipes() (outPipes, error) {
	var p outPipes
	var err error
	if p.outR, p.outW, err = pipe(true); err != nil {
		return outPipes{}, err
	}
	if p.errR, p.errW, err = pipe(true); err != nil {
		p.outR.Close()
		p.outW.Close()
		return outPipes{}, err
	}
	return p, nil
}

func (p outPipes) close() {
	for _, f := range []*os.File{p.outR, p.outW, p.errR, p.errW} {
		f.Close()
	}
}

// readyPipes are the pairs made ahead. Its zero value is ready to use.
type readyPipes struct {
	mu      sync.Mutex
	ready   []outPipes
	filling bool
	closed  bool
	wg      sync.WaitGroup
}

// take returns a ready pair, or false if there is none (or r is nil). The
// pair is the caller's to close.
func (r *readyPipes) take() (outPipes, bool) {
	if r == nil {
		return outPipes{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ready) == 0 {
		return outPipes{}, false
	}
	p := r.ready[0] // the oldest: each waits its turn
	r.ready = r.ready[1:]
	return p, true
}

// refill has the filler make pairs until pipesWanted are ready. It is
// called after a spawn, off the command's path to its start.
func (r *readyPipes) refill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.filling && !r.closed && len(r.ready) < pipesWanted {
		r.filling = true
		r.wg.Go(r.fill)
	}
}

func (r *readyPipes) fill() {
	for {
		r.mu.Lock()
		if r.closed || len(r.ready) >= pipesWanted {
			r.filling = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		p, err := newOutPipes()
		r.mu.Lock()
		if err != nil || r.closed {
			// Out of descriptors, say: commands make their own meanwhile
			// and report why they cannot.
			r.filling = false
			r.mu.Unlock()
			if err == nil {
				p.close()
			}
			return
		}
		r.ready = append(r.ready, p)
		r.mu.Unlock()
	}
}

// close closes the ready pairs once the filler has stopped; a take after
// it finds none.
func (r *readyPipes) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
	r.mu.Lock()
	ready := r.ready
	r.ready = nil
	r.mu.Unlock()
	for _, p := range ready {
		p.close()
	}
}
