package proc

import (
	"log/slog"
	"os"
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

// readyPipes are the pairs made ahead. Its zero value has none ready and
// makes none: newReadyPipes makes one that does.
type readyPipes struct {
	ahead madeAhead[outPipes]
}

func newReadyPipes(log *slog.Logger) *readyPipes {
	return &readyPipes{ahead: madeAhead[outPipes]{
		want: pipesWanted,
		make: newOutPipes,
		drop: outPipes.close,
		failed: func(err error) {
			// Out of descriptors, say: commands make their own meanwhile,
			// and report why they cannot.
			log.Debug("output pipes could not be made ahead", "err", err)
		},
	}}
}

// take returns a ready pair, or false if there is none (or r is nil). The
// pair is the caller's to close.
func (r *readyPipes) take() (outPipes, bool) {
	if r == nil {
		return outPipes{}, false
	}
	return r.ahead.take(nil)
}

// refill has the filler make pairs until pipesWanted are ready. It is
// called after a spawn, off the command's path to its start.
func (r *readyPipes) refill() { r.ahead.refill() }

// close closes the ready pairs once the filler has stopped; a take after
// it begins finds none.
func (r *readyPipes) close() { r.ahead.close() }
