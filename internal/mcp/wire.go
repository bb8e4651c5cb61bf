package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The JSON-RPC boundary. The SDK holds a request id as an int64 or a
// string, decoded through float64: 1.5 came back as 1, 2^64 as -2^63 and
// 9007199254740993 as 9007199254740992. JSON-RPC wants the id echoed as
// sent, so every id the SDK would not echo byte for byte is swapped, on the
// way in, for a string token unique to this process, and the token is
// swapped back for the client's bytes in everything written for that
// request. A notifications/cancelled that names such an id names its
// token. The SDK also answers transport errors (bad headers, unknown
// session, malformed body) in text/plain: they are rewritten as JSON-RPC
// error responses (application/json, the same HTTP status).

// JSON-RPC error codes dshd answers with itself.
const (
	codeParseError      = -32700
	codeInvalidRequest  = -32600
	codeInternalError   = -32603
	codeSessionNotFound = -32001 // the code MCP's reference SDKs use with a 404
	codeTooManySessions = -32002
	// codeUnsupportedVersion answers an MCP-Protocol-Version header the
	// server does not speak, with the versions it does as data (MCP's code
	// for it, which the SDK answers for the versions after 2025-11-25).
	codeUnsupportedVersion = -32022
)

// errRequestOver is what a write after ServeMCP has returned gets.
var errRequestOver = errors.New("mcp: the request's answer is over")

// idMap swaps ids the SDK would change for tokens, per request.
type idMap struct {
	prefix string // "dshd-rpc-<random>-": no client id starts so by chance
	next   atomic.Uint64
	// inFlight maps session id + "\x00" + a client id's bytes to the token
	// standing for it while its request runs, for cancellations.
	inFlight sync.Map
}

func newIDMap() *idMap {
	return &idMap{prefix: "dshd-rpc-" + rand.Text()[:12] + "-"}
}

// sdkEchoes reports whether the SDK writes raw back unchanged: a string it
// re-encodes to the same bytes, or an integer it holds exactly. The ids
// clients send (small integers, plain strings) are told without decoding.
func sdkEchoes(raw json.RawMessage) bool {
	return plainID(raw) || decodedEchoes(raw)
}

// decodedEchoes is sdkEchoes by decoding raw as the SDK does and encoding
// it again.
func decodedEchoes(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	var back []byte
	switch v := v.(type) {
	case string:
		back, _ = json.Marshal(v)
	case float64:
		// The SDK's own conversion (jsonrpc2.MakeID), then its encoding.
		back = strconv.AppendInt(nil, int64(v), 10)
	default:
		return true // null or not an id: the SDK rejects it unchanged
	}
	return bytes.Equal(back, raw)
}

// plainID reports whether raw is an id the SDK surely echoes: an integer of
// at most 15 digits, without a leading zero or a minus zero (exact in the
// float64 the SDK decodes it through), or a string of printable ASCII that
// encoding/json writes back as it is (no escape, no '<', '>' or '&').
func plainID(raw []byte) bool {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		for _, c := range raw[1 : len(raw)-1] {
			if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
		}
		return true
	}
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(raw) > 1) {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// message is one JSON-RPC message as dshd needs to see it.
type message struct {
	fields map[string]json.RawMessage
	id     json.RawMessage // as the client sent it, trimmed; nil without one
	method string
}

// parse splits a POST body into its messages (a batch or one). ok is false
// when the body is not JSON-RPC shaped JSON.
func parse(body []byte) (msgs []*message, batch, ok bool) {
	body = bytes.TrimSpace(body)
	var raws []json.RawMessage
	if len(body) > 0 && body[0] == '[' {
		if json.Unmarshal(body, &raws) != nil {
			return nil, true, false
		}
		batch = true
	} else {
		raws = []json.RawMessage{body}
	}
	for _, r := range raws {
		m := &message{}
		if json.Unmarshal(r, &m.fields) != nil || m.fields == nil {
			return nil, batch, false
		}
		if id, ok := m.fields["id"]; ok {
			m.id = bytes.TrimSpace(id)
		}
		if meth, ok := m.fields["method"]; ok {
			_ = json.Unmarshal(meth, &m.method)
		}
		msgs = append(msgs, m)
	}
	return msgs, batch, true
}

// swap replaces, in msgs, each id the SDK would change with a token, and the
// requestId of a cancellation with the token of the request it names. It
// returns the new body, the tokens' replacements (the quoted token's bytes
// to the client's), and a function that forgets the in-flight tokens.
func (m *idMap) swap(session string, msgs []*message, batch bool) (body []byte, back map[string][]byte, done func()) {
	back = map[string][]byte{}
	var keys []string
	changed := false
	for _, msg := range msgs {
		switch {
		case msg.id != nil && msg.method != "" && !sdkEchoes(msg.id):
			tok := m.prefix + strconv.FormatUint(m.next.Add(1), 10)
			quoted, _ := json.Marshal(tok)
			back[string(quoted)] = msg.id
			msg.fields["id"] = quoted
			if session != "" {
				k := session + "\x00" + string(msg.id)
				m.inFlight.Store(k, json.RawMessage(quoted))
				keys = append(keys, k)
			}
		case msg.method == "notifications/cancelled" && session != "":
			var p map[string]json.RawMessage
			if json.Unmarshal(msg.fields["params"], &p) != nil || p["requestId"] == nil {
				continue
			}
			if tok, ok := m.inFlight.Load(session + "\x00" + string(bytes.TrimSpace(p["requestId"]))); ok {
				p["requestId"] = tok.(json.RawMessage)
				msg.fields["params"], _ = json.Marshal(p)
				changed = true
			}
		}
	}
	done = func() {
		for _, k := range keys {
			m.inFlight.Delete(k)
		}
	}
	if len(back) == 0 && !changed {
		return nil, back, done // nothing changed: keep the client's bytes
	}
	if !batch {
		body, _ = json.Marshal(msgs[0].fields)
		return body, back, done
	}
	all := make([]map[string]json.RawMessage, len(msgs))
	for i, msg := range msgs {
		all[i] = msg.fields
	}
	body, _ = json.Marshal(all)
	return body, back, done
}

// rpcError is a JSON-RPC error response with the id as raw bytes, and
// data when given.
func rpcError(id json.RawMessage, code int, msg string, data ...any) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	type rpcErr struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}
	e := rpcErr{Code: code, Message: msg}
	if len(data) > 0 {
		e.Data = data[0]
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcErr          `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: e})
	return b
}

// writeRPCError answers a request with a JSON-RPC error.
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string, data ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(rpcError(id, code, msg, data...))
}

// wire is the ResponseWriter the SDK writes to: it swaps tokens back for
// the client's ids and turns a text/plain error into a JSON-RPC one. The
// SDK writes from its own goroutines and dshd writes the keep-alive
// comments of a tool call's stream (see stream.go) from another: mu orders
// them, and nothing is written once finish has run.
type wire struct {
	http.ResponseWriter
	back   map[string][]byte
	prefix string          // `"` and the prefix every token starts with
	id     json.RawMessage // the request's id, for a converted error (nil: null)

	// cancelled: the client cancelled the request; its answer is not sent.
	cancelled atomic.Bool
	// handled: the tool call's handler has returned (tools/call only).
	handled atomic.Bool

	mu       sync.Mutex
	held     []byte // a tail that may be the start of a token
	errBody  *bytes.Buffer
	status   int
	finished bool          // ServeMCP has returned, or is about to
	stopKeep chan struct{} // closed to end the keep-alive comments (nil: none)
}

func (w *wire) WriteHeader(status int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeader(status)
}

func (w *wire) writeHeader(status int) {
	if w.status != 0 || w.finished {
		return
	}
	w.status = status
	if status >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.errBody = &bytes.Buffer{}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Del("Content-Length")
		w.Header().Del("X-Content-Type-Options")
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return 0, errRequestOver
	}
	if w.cancelled.Load() && isResponse(p) {
		return len(p), nil // as if sent: the client wants none (see cancelled)
	}
	if w.status == 0 {
		w.writeHeader(http.StatusOK)
	}
	if w.errBody != nil {
		return w.errBody.Write(p)
	}
	if len(w.back) == 0 {
		return w.ResponseWriter.Write(p)
	}
	buf := append(w.held, p...)
	w.held = nil
	for tok, raw := range w.back {
		buf = bytes.ReplaceAll(buf, []byte(tok), raw)
	}
	// Hold back a tail that could begin a token split across writes.
	if i := bytes.LastIndexByte(buf, '"'); i >= 0 {
		tail := string(buf[i:])
		if strings.HasPrefix(w.prefix, tail) || strings.HasPrefix(tail, w.prefix) {
			w.held = append([]byte(nil), buf[i:]...)
			buf = buf[:i]
		}
	}
	if _, err := w.ResponseWriter.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush sends what was held back: the SDK flushes after whole messages.
func (w *wire) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flush()
}

func (w *wire) flush() {
	if w.finished {
		return
	}
	if len(w.held) > 0 {
		_, _ = w.ResponseWriter.Write(w.held)
		w.held = nil
	}
	if w.errBody == nil {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *wire) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes what remains: the held tail, or the converted error. No
// write follows it.
func (w *wire) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return
	}
	defer func() { w.finished = true }()
	if w.stopKeep != nil {
		close(w.stopKeep)
		w.stopKeep = nil
	}
	if w.errBody != nil {
		code := codeInvalidRequest
		switch {
		case w.status == http.StatusNotFound:
			code = codeSessionNotFound
		case w.status >= 500:
			code = codeInternalError
		}
		_, _ = w.ResponseWriter.Write(rpcError(w.id, code, strings.TrimSpace(w.errBody.String())))
		return
	}
	if len(w.held) > 0 {
		_, _ = w.ResponseWriter.Write(w.held)
	}
}

// Cancelled requests. MCP says the receiver of notifications/cancelled
// should not answer the request it names, and clients that forgot the
// request report an answer to it as an error (the TypeScript SDK: "Received
// a response for an unknown message ID"). The SDK answers every request, so
// ServeMCP marks the wire of a request its client cancels before the SDK
// sees the cancellation, and the wire drops the answer. The call still ends
// as a stopped call does, recorded in the transcript.

// inFlight registers out as the wire of the request id of session, for a
// cancellation to find; the returned function forgets it.
func (h *Handler) inFlight(session string, id json.RawMessage, out *wire) (forget func()) {
	key := session + "\x00" + string(id)
	h.requests.Store(key, out)
	return func() { h.requests.CompareAndDelete(key, out) }
}

// cancelled marks the wires of the requests msgs cancel.
func (h *Handler) cancelled(session string, msgs []*message) {
	for _, msg := range msgs {
		if msg.method != "notifications/cancelled" {
			continue
		}
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(msg.fields["params"], &p) != nil || p.RequestID == nil {
			continue
		}
		if w, ok := h.requests.Load(session + "\x00" + string(bytes.TrimSpace(p.RequestID))); ok {
			w.(*wire).cancelled.Store(true)
		}
	}
}

// isResponse reports whether p, an SSE event or a JSON body as the SDK
// writes them, is a JSON-RPC response (not a notification or request).
func isResponse(p []byte) bool {
	data := p
	if i := bytes.Index(p, []byte("data: ")); i >= 0 && !bytes.HasPrefix(bytes.TrimSpace(p), []byte("{")) {
		data = p[i+len("data: "):]
		if j := bytes.IndexByte(data, '\n'); j >= 0 {
			data = data[:j]
		}
	}
	var m struct {
		Method *string         `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	return json.Unmarshal(data, &m) == nil && m.Method == nil && (m.Result != nil || m.Error != nil)
}

// demote is the SDK's log handler: the SDK logs a client's protocol
// mistakes (a second initialize, a call before initialized, …) at ERROR,
// and every session's start and end at INFO; dshd logs them one level
// down, so ERROR stays for the server's own failures.
type demote struct{ slog.Handler }

// clientMistakes are the SDK's ERROR messages about what a client sent.
var clientMistakes = map[string]bool{
	"duplicate initialize request":         true,
	"duplicate initialized notification":   true,
	"initialized before initialize":        true,
	"method invalid during initialization": true,
	"method removed in the new protocol":   true,
}

func (d demote) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level >= slog.LevelError && clientMistakes[r.Message]:
		r.Level = slog.LevelInfo
	case r.Level == slog.LevelInfo:
		r.Level = slog.LevelDebug
	}
	if !d.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

func (d demote) Enabled(context.Context, slog.Level) bool { return true }

func (d demote) WithAttrs(as []slog.Attr) slog.Handler { return demote{d.Handler.WithAttrs(as)} }

func (d demote) WithGroup(name string) slog.Handler { return demote{d.Handler.WithGroup(name)} }
