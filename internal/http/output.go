package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/http/api"
)

// GetJobOutput serves a job's output: raw bytes of one stream from an offset,
// or a server-sent event stream of both, resumable by Last-Event-ID.
func (s *Server) GetJobOutput(ctx context.Context, req api.GetJobOutputRequestObject) (api.GetJobOutputResponseObject, error) {
	job, err := s.jobs.Job(req.Id)
	if err != nil {
		return nil, err
	}
	if req.Params.Stream != nil {
		stream := exec.Stdout
		if *req.Params.Stream == "stderr" {
			stream = exec.Stderr
		}
		return api.GetJobOutput200ApplicationoctetStreamResponse{
			Body: &rawOutput{job: job, stream: stream, off: deref(req.Params.Offset)},
		}, nil
	}
	var pos [2]int64
	if id := deref(req.Params.LastEventID); id != "" {
		if pos, err = parseEventID(id); err != nil {
			return nil, err
		}
	}
	es := &eventStream{ctx: ctx, job: job, pos: pos, keepAlive: s.keepAlive}
	// The first bytes go out at once, so the client has the response
	// headers before any output exists; they also set the reconnection delay.
	es.pending.WriteString("retry: 1000\n\n")
	return sseResponse{api.GetJobOutput200TexteventStreamResponse{Body: es}}, nil
}

// rawOutput reads one stream from an offset up to what has been written.
type rawOutput struct {
	job    *exec.Job
	stream exec.Stream
	off    int64
}

func (r *rawOutput) Read(p []byte) (int, error) {
	n, err := r.job.ReadOutput(r.stream, r.off, p)
	r.off += int64(n)
	if n == 0 && err == nil {
		return 0, io.EOF // nothing more yet: the answer ends at what exists now
	}
	return n, err
}

// sseResponse adds the headers an event stream needs to the generated one.
type sseResponse struct {
	api.GetJobOutput200TexteventStreamResponse
}

func (r sseResponse) VisitGetJobOutputResponse(w http.ResponseWriter) error {
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	return r.GetJobOutput200TexteventStreamResponse.VisitGetJobOutputResponse(w)
}

// parseEventID parses "<stdoutOffset>.<stderrOffset>".
func parseEventID(id string) ([2]int64, error) {
	a, b, ok := strings.Cut(id, ".")
	out, errOut := strconv.ParseInt(a, 10, 64)
	errs, errErr := strconv.ParseInt(b, 10, 64)
	if !ok || errOut != nil || errErr != nil || out < 0 || errs < 0 {
		return [2]int64{}, fmt.Errorf("%w: Last-Event-ID %q is not <stdoutOffset>.<stderrOffset>", errBadRequest, id)
	}
	return [2]int64{out, errs}, nil
}

// eventStream renders a job's output as server-sent events on demand: each
// Read returns the next event, waiting for output when there is none. Every
// event's id holds both stream offsets after it, so a client that resumes
// from it gets neither a gap nor a repeat. It ends after the exit event, or
// when the client goes away.
type eventStream struct {
	ctx       context.Context
	job       *exec.Job
	pos       [2]int64 // next offset of stdout, stderr
	keepAlive time.Duration
	pending   bytes.Buffer
	chunk     []byte
	done      bool
}

var streamNames = [2]string{"stdout", "stderr"}

func (e *eventStream) Read(p []byte) (int, error) {
	for e.pending.Len() == 0 {
		if e.done {
			return 0, io.EOF
		}
		if err := e.next(); err != nil {
			return 0, err
		}
	}
	return e.pending.Read(p)
}

// next appends at least one event (or keep-alive comment) to e.pending.
func (e *eventStream) next() error {
	if e.chunk == nil {
		e.chunk = make([]byte, 32<<10)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		// Take the change channel before reading, so output written between
		// the read and the wait still wakes us.
		changed := e.job.OutputChanged()
		finished := true
		for i, stream := range []exec.Stream{exec.Stdout, exec.Stderr} {
			n, err := e.job.ReadOutput(stream, e.pos[i], e.chunk)
			if err != nil && err != io.EOF {
				return err
			}
			if err == nil {
				finished = false
			}
			if n == 0 {
				continue
			}
			data := e.chunk[:n]
			if err == nil {
				// Hold back a rune cut in half until its last bytes arrive.
				data = wholeRunes(data)
				if len(data) == 0 {
					continue
				}
			}
			e.pos[i] += int64(len(data))
			e.writeEvent(streamNames[i], data)
			return nil
		}
		if finished {
			snap := e.job.Snapshot()
			b, err := json.Marshal(toAPIJob(snap))
			if err != nil {
				return err
			}
			e.writeRaw("exit", b)
			e.done = true
			return nil
		}
		if timer == nil {
			timer = time.NewTimer(e.keepAlive)
		}
		select {
		case <-changed:
		case <-e.ctx.Done():
			e.done = true
			return io.EOF
		case <-timer.C:
			e.pending.WriteString(": keep-alive\n\n")
			return nil
		}
	}
}

func (e *eventStream) writeEvent(name string, data []byte) {
	// JSON-encode the chunk: it keeps newlines and control bytes inside one
	// data line. Bytes that are not UTF-8 become U+FFFD; the raw route
	// (?stream=&offset=) serves exact bytes.
	b, _ := json.Marshal(string(data))
	e.writeRaw(name, b)
}

func (e *eventStream) writeRaw(name string, data []byte) {
	fmt.Fprintf(&e.pending, "id: %d.%d\nevent: %s\ndata: %s\n\n", e.pos[0], e.pos[1], name, data)
}

// wholeRunes trims an incomplete UTF-8 sequence from the end of b.
func wholeRunes(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		c := b[len(b)-i]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
