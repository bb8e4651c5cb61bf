package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
		body, n, err := job.OpenOutput(stream, deref(req.Params.Offset))
		if err != nil {
			return nil, err
		}
		return rawResponse{body: body, n: n, logger: s.logger}, nil
	}
	var pos [2]int64
	if id := deref(req.Params.LastEventID); id != "" {
		var sawExit bool
		if pos, sawExit, err = parseEventID(id); err != nil {
			return nil, err
		}
		// The client has had everything, the exit event included: 204 is
		// how the SSE standard tells it to stop reconnecting.
		if sawExit && atEnd(job, pos) {
			return api.GetJobOutput204Response{}, nil
		}
	}
	return &eventStream{ctx: ctx, job: job, pos: pos, keepAlive: s.keepAlive, logger: s.logger}, nil
}

// atEnd reports whether job is finished and pos is the end of both streams.
func atEnd(job *exec.Job, pos [2]int64) bool {
	var b [1]byte
	for i, stream := range []exec.Stream{exec.Stdout, exec.Stderr} {
		if _, err := job.ReadOutput(stream, pos[i], b[:]); err != io.EOF {
			return false
		}
	}
	return true
}

// parseEventID parses "<stdoutOffset>.<stderrOffset>", optionally followed
// by ".exit" (the id of the exit event).
func parseEventID(id string) (pos [2]int64, exit bool, err error) {
	rest, exit := strings.CutSuffix(id, ".exit")
	a, b, ok := strings.Cut(rest, ".")
	out, errOut := strconv.ParseInt(a, 10, 64)
	errs, errErr := strconv.ParseInt(b, 10, 64)
	if !ok || errOut != nil || errErr != nil || out < 0 || errs < 0 {
		return pos, false, fmt.Errorf("%w: Last-Event-ID %q is not <stdoutOffset>.<stderrOffset>[.exit]", errBadRequest, id)
	}
	return [2]int64{out, errs}, exit, nil
}

// rawResponse sends one stream's bytes with their length. Spooled bytes go
// from the file to the socket by sendfile.
type rawResponse struct {
	body   io.ReadCloser
	n      int64
	logger *slog.Logger
}

func (r rawResponse) VisitGetJobOutputResponse(w http.ResponseWriter) error {
	defer r.body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(r.n, 10))
	w.WriteHeader(http.StatusOK)
	// The middleware's wrappers only record the status, which is written
	// now; the connection's own writer has the ReadFrom that reaches
	// sendfile.
	if _, err := io.Copy(readerFrom(w), r.body); err != nil {
		// The response has begun: nothing can be said to the client, and
		// a client going away is not a server error.
		r.logger.Debug("raw output ended early", "err", err)
	}
	return nil
}

// readerFrom returns the first writer in w's Unwrap chain that implements
// io.ReaderFrom, or w.
func readerFrom(w http.ResponseWriter) io.Writer {
	for u := w; ; {
		if rf, ok := u.(io.ReaderFrom); ok {
			if ww, ok := rf.(io.Writer); ok {
				return ww
			}
		}
		next, ok := u.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		u = next.Unwrap()
	}
}

// Sizes of the event stream's buffers. One read takes up to chunkSize bytes
// of a stream (one event); events are gathered up to batchSize before a
// write, so a fast stream costs few system calls and a slow client holds at
// most about chunkSize+batchSize+an encoded chunk of memory.
const (
	chunkSize = 64 << 10
	batchSize = 256 << 10
)

// eventBuffers are reused between streams; they are caches, not state.
type eventBuffers struct{ chunk, out []byte }

var eventPool = sync.Pool{New: func() any {
	return &eventBuffers{chunk: make([]byte, chunkSize), out: make([]byte, 0, batchSize+chunkSize*2)}
}}

// eventStream serves a job's output as server-sent events. Every output
// event's id holds both stream offsets after it, so a client that resumes
// from it gets neither a gap nor a repeat. It ends after the exit event, or
// when the client goes away.
type eventStream struct {
	ctx       context.Context
	job       *exec.Job
	pos       [2]int64 // next offset of stdout, stderr
	keepAlive time.Duration
	logger    *slog.Logger
	idle      *time.Timer // keep-alive timer, made on the first wait
}

var streamNames = [2]string{"stdout", "stderr"}

func (e *eventStream) VisitGetJobOutputResponse(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := e.serve(w); err != nil {
		// The stream has begun: there is no status left to send. A
		// client that leaves is normal; anything else is logged here,
		// once, and the stream ends (a reconnect resumes it).
		if errors.Is(err, errClientGone) {
			e.logger.Debug("event stream client left", "job_id", e.job.ID(), "err", err)
		} else {
			e.logger.Warn("event stream ended", "job_id", e.job.ID(), "err", err)
		}
	}
	return nil
}

// errClientGone marks a failed write or a cancelled request.
var errClientGone = errors.New("client gone")

// serve writes the stream: the reconnection delay at once, then batches of
// events as the job writes, flushed whenever the stream catches up, a
// keep-alive comment when idle, and the exit event last.
func (e *eventStream) serve(w http.ResponseWriter) error {
	bufs := eventPool.Get().(*eventBuffers)
	ew := &eventWriter{w: w, rc: http.NewResponseController(w), out: bufs.out[:0]}
	defer func() {
		bufs.out = ew.out[:0]
		eventPool.Put(bufs)
		if e.idle != nil {
			e.idle.Stop()
		}
	}()
	// The first bytes go out at once, so the client has the response
	// headers before any output exists; they also set the reconnection delay.
	ew.out = append(ew.out, "retry: 1000\n\n"...)
	if err := ew.send(true); err != nil {
		return err
	}
	for {
		// Take the change channel before reading, so output written between
		// the read and the wait still wakes us.
		changed := e.job.OutputChanged()
		added, finished, err := e.fill(ew, bufs.chunk)
		switch {
		case err != nil:
			return err
		case finished:
			if ew.out, err = e.appendExit(ew.out); err != nil {
				return err
			}
			return ew.send(true)
		case added:
			// More may be there already: write without flushing, and look
			// (unless the request is over: shutdown ends streams too).
			if err := ew.send(false); err != nil {
				return err
			}
			if err := e.ctx.Err(); err != nil {
				return fmt.Errorf("%w: %v", errClientGone, context.Cause(e.ctx))
			}
			continue
		}
		// Caught up: everything written goes to the client now.
		if err := ew.send(true); err != nil {
			return err
		}
		if err := e.wait(ew, changed); err != nil {
			return err
		}
	}
}

// fill appends the events readable now to ew's batch, until the batch is
// full or nothing more is readable. It reports whether it appended any, and
// whether the job is finished and all of its output is in the batch.
func (e *eventStream) fill(ew *eventWriter, chunk []byte) (added, finished bool, err error) {
	for len(ew.out) < batchSize {
		var more bool
		ew.out, more, finished, err = e.appendEvents(ew.out, chunk)
		if err != nil {
			return added, false, err
		}
		added = added || more
		if !more {
			break
		}
	}
	return added, finished, nil
}

// wait returns when the job's output changes (changed is closed), or after
// keepAlive with nothing new, having queued a keep-alive comment. It fails
// with errClientGone when the request ends.
func (e *eventStream) wait(ew *eventWriter, changed <-chan struct{}) error {
	if e.idle == nil {
		e.idle = time.NewTimer(e.keepAlive)
	} else {
		e.idle.Reset(e.keepAlive)
	}
	select {
	case <-changed:
	case <-e.ctx.Done():
		return fmt.Errorf("%w: %v", errClientGone, context.Cause(e.ctx))
	case <-e.idle.C:
		ew.out = append(ew.out, ": keep-alive\n\n"...)
	}
	return nil
}

// eventWriter batches encoded events and writes them to the client.
type eventWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	out []byte // the batch not written yet
}

// send writes the batch, and with flush pushes everything written to the
// client. A failure means the client is gone (errClientGone).
func (ew *eventWriter) send(flush bool) error {
	if len(ew.out) > 0 {
		if _, err := ew.w.Write(ew.out); err != nil {
			return fmt.Errorf("%w: %v", errClientGone, err)
		}
		ew.out = ew.out[:0]
	}
	if flush {
		if err := ew.rc.Flush(); err != nil {
			return fmt.Errorf("%w: %v", errClientGone, err)
		}
	}
	return nil
}

// appendEvents appends at most one event per stream, each of the bytes
// readable now from its offset. It reports whether it appended any, and
// whether both streams are finished and fully sent.
func (e *eventStream) appendEvents(out, chunk []byte) (_ []byte, added, finished bool, err error) {
	finished = true
	for i, stream := range []exec.Stream{exec.Stdout, exec.Stderr} {
		n, err := e.job.ReadOutput(stream, e.pos[i], chunk)
		if err == io.EOF {
			continue
		}
		finished = false
		if err != nil {
			return out, added, false, err
		}
		if n == 0 {
			continue
		}
		data := chunk[:n]
		if whole := wholeRunes(data); len(whole) < n {
			// A character may be cut by the read: hold its first bytes
			// back until the rest arrives, unless the stream has ended.
			var b [1]byte
			if _, err := e.job.ReadOutput(stream, e.pos[i]+int64(n), b[:]); err != io.EOF {
				data = whole
			}
		}
		if len(data) == 0 {
			continue
		}
		e.pos[i] += int64(len(data))
		out = e.appendEvent(out, streamNames[i], data)
		added = true
	}
	return out, added, finished, nil
}

// appendEvent appends one output event: "id", "event" and one "data" line
// holding data as a JSON string when it is UTF-8, else as {"base64": …}.
func (e *eventStream) appendEvent(out []byte, name string, data []byte) []byte {
	out = e.appendHead(out, name, false)
	if utf8.Valid(data) {
		out = appendJSONString(out, data)
	} else {
		out = append(out, `{"base64":"`...)
		out = base64.StdEncoding.AppendEncode(out, data)
		out = append(out, `"}`...)
	}
	return append(out, "\n\n"...)
}

// appendExit appends the exit event, with the job.
func (e *eventStream) appendExit(out []byte) ([]byte, error) {
	b, err := json.Marshal(toAPIJob(e.job.Snapshot()))
	if err != nil {
		return out, err
	}
	out = e.appendHead(out, "exit", true)
	out = append(out, b...)
	return append(out, "\n\n"...), nil
}

func (e *eventStream) appendHead(out []byte, name string, exit bool) []byte {
	out = append(out, "id: "...)
	out = strconv.AppendInt(out, e.pos[0], 10)
	out = append(out, '.')
	out = strconv.AppendInt(out, e.pos[1], 10)
	if exit {
		out = append(out, ".exit"...)
	}
	out = append(out, "\nevent: "...)
	out = append(out, name...)
	return append(out, "\ndata: "...)
}

// jsonSafe marks the bytes a JSON string holds as they are: everything but
// control bytes, '"' and '\\'. Bytes ≥ 0x80 are part of valid UTF-8 here.
var jsonSafe = func() (t [256]bool) {
	for i := range t {
		t[i] = i >= 0x20 && i != '"' && i != '\\'
	}
	return t
}()

// appendJSONString appends s, valid UTF-8, as a JSON string. Unlike
// encoding/json it escapes no HTML characters (the data is not HTML) and
// copies runs of plain bytes at once, found eight bytes at a time: this is
// what every byte of a job's output passes through on its way to an event
// stream.
func appendJSONString(out, s []byte) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		for i+8 <= len(s) && plainWord(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		// A word holding a byte to escape (or the last few bytes): byte
		// by byte, then words again.
		for end := min(i+8, len(s)); i < end; i++ {
			c := s[i]
			if jsonSafe[c] {
				continue
			}
			out = append(out, s[start:i]...)
			switch c {
			case '"', '\\':
				out = append(out, '\\', c)
			case '\n':
				out = append(out, '\\', 'n')
			case '\r':
				out = append(out, '\\', 'r')
			case '\t':
				out = append(out, '\\', 't')
			default:
				out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			start = i + 1
		}
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

// plainWord reports whether none of the eight bytes of w needs escaping in
// a JSON string: no control byte, '"' or '\\'. Each test is the classic
// "has a zero byte" one, (x - 0x01…) & ^x & 0x80…, which can flag a byte
// wrongly only after a byte truly flagged: it never misses one.
func plainWord(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	ctl := (w - ones*0x20) & ^w & highs // a byte < 0x20
	q := w ^ (ones * '"')
	q = (q - ones) & ^q & highs
	bs := w ^ (ones * '\\')
	bs = (bs - ones) & ^bs & highs
	return ctl|q|bs == 0
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
