package mcp

import (
	"net/http"
	"strconv"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tool call's answer is an SSE stream. The SDK writes its status and
// headers with the stream's first event, which for a silent command without
// progress is the result: a client that bounds its wait for the response
// headers (Claude Code and Gemini CLI give up after about 60 s) loses the
// result of any command that prints nothing for that long. So once the SDK
// has accepted a call and its handler starts, the stream is opened at once
// (status, headers and an SSE comment, flushed), and an SSE comment follows
// every Options.KeepAlive while the call runs, so that nothing between the
// client and dshd takes the stream for idle. Comments carry no message:
// clients skip them.

// streamHeader carries, on a tools/call POST as the SDK hands it to the
// call's handler, the key of the request's wire in Handler.streams. ServeMCP
// sets it (replacing whatever the client sent under that name).
const streamHeader = "Dsh-Mcp-Stream"

// defaultKeepAlive is the time between two keep-alive comments: below the
// idle timeouts of common proxies (60 s and more) and of clients' reads.
const defaultKeepAlive = 15 * time.Second

// The comments: the first opens the stream, the others keep it alive.
var (
	openComment      = []byte(": ok\n\n")
	keepAliveComment = []byte(": keep-alive\n\n")
)

// track registers out as the stream of the tools/call request r carries,
// for its handler to open; the returned function forgets it.
func (h *Handler) track(r *http.Request, out *wire) (forget func()) {
	// A count: ServeMCP has removed the header from what the client sent.
	key := strconv.FormatUint(h.streamSeq.Add(1), 36)
	r.Header.Set(streamHeader, key)
	h.streams.Store(key, out)
	return func() { h.streams.Delete(key) }
}

// streamOf is the wire of a call's request, if ServeMCP tracked it.
func (h *Handler) streamOf(req *sdk.CallToolRequest) *wire {
	if req.Extra == nil || req.Extra.Header == nil {
		return nil
	}
	w, ok := h.streams.Load(req.Extra.Header.Get(streamHeader))
	if !ok {
		return nil
	}
	return w.(*wire)
}

// open writes the stream's status and headers (the SDK has set them by the
// time a handler runs) and a comment, flushed, unless something was
// written already; then a keep-alive comment every interval until stop is
// called or the request is over. A failed write ends the comments: the
// client has gone, which the SDK learns on its own.
func (w *wire) open(every time.Duration) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished || w.stopKeep != nil {
		return func() {}
	}
	if w.status == 0 {
		w.writeHeader(http.StatusOK)
		if _, err := w.ResponseWriter.Write(openComment); err != nil {
			return func() {}
		}
		w.flush()
	}
	halt := make(chan struct{})
	w.stopKeep = halt
	// A timer, not a goroutine: most calls end before the first comment.
	var t *time.Timer
	t = time.AfterFunc(every, func() {
		if w.keepAlive(halt) {
			w.mu.Lock()
			if w.stopKeep == halt {
				t.Reset(every)
			}
			w.mu.Unlock()
		}
	})
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Stop()
		if w.stopKeep == halt {
			close(halt)
			w.stopKeep = nil
		}
	}
}

// keepAlive writes one keep-alive comment; false: no more may be written.
func (w *wire) keepAlive(halt chan struct{}) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished || w.stopKeep != halt || w.errBody != nil {
		return false
	}
	if len(w.held) > 0 {
		return true // mid-message: a comment must not split it; next time
	}
	if _, err := w.ResponseWriter.Write(keepAliveComment); err != nil {
		return false
	}
	return http.NewResponseController(w.ResponseWriter).Flush() == nil
}
