package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/client_golang/prometheus"
)

// ctxKey is the type of this package's context keys.
type ctxKey int

const (
	requestIDKey ctxKey = iota
	acceptKey
	forwardTargetKey
)

// withForwardTarget stores where a request is forwarded to.
func withForwardTarget(ctx context.Context, t *forwardTarget) context.Context {
	return context.WithValue(ctx, forwardTargetKey, t)
}

// requestIDFrom returns the request id stored by the requestID middleware.
func requestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// validRequestID accepts ids a client may choose: short, printable ASCII.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// requestID takes the client's X-Request-ID when it is sensible, or makes one,
// and echoes it in the response.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !validRequestID(id) {
			id = s.ids.New("req_")
		}
		w.Header().Set("X-Request-ID", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// statusRecorder remembers the status a handler wrote. It keeps Flush and
// Unwrap working so server-sent events and http.ResponseController still do.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpMetrics are the request metrics, by route pattern, method and status.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dshd_http_requests_total",
			Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dshd_http_request_duration_seconds",
			Help:    "HTTP request latency by route, method and status.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}, []string{"route", "method", "status"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency)
	}
	return m
}

// observe logs each request and counts it by chi's route pattern, so ids in
// paths do not explode the label space.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.logger.ErrorContext(r.Context(), "handler panic", "method", r.Method, "path", r.URL.Path, "panic", v)
				if rec.status == 0 {
					s.writeError(rec, r, errors.New("panic"))
				}
			}
			route := s.routePattern(r)
			status := strconv.Itoa(max(rec.status, http.StatusOK))
			elapsed := time.Since(start)
			s.metrics.requests.WithLabelValues(route, r.Method, status).Inc()
			s.metrics.latency.WithLabelValues(route, r.Method, status).Observe(elapsed.Seconds())
			if s.logger.Enabled(r.Context(), slog.LevelDebug) { // the arguments would cost allocations at every request
				s.logger.DebugContext(r.Context(), "request",
					"method", r.Method, "route", route, "status", rec.status,
					"duration_ms", float64(elapsed.Microseconds())/1000, "request_id", requestIDFrom(r.Context()))
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

// routePattern names the route r matched, also when a middleware rejected
// it before chi routed it.
func (s *Server) routePattern(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		return rc.RoutePattern()
	}
	if p := s.router.Find(chi.NewRouteContext(), r.Method, r.URL.Path); p != "" {
		return p
	}
	return "unmatched"
}

// hasBody reports whether r announces a request body.
func hasBody(r *http.Request) bool { return r.Body != nil && r.Body != http.NoBody }

// bodyDeadline gives a client s.bodyTimeout, from the end of its headers, to
// send its whole body, on every route (open ones included). It sets the
// connection's read deadline before anything can read the body. limitBody
// lifts the deadline once the body is in, so the server's own watch on the
// connection cannot cut SSE streams, long-polls or downloads that outlast
// it. Requests without a body have no read deadline after their headers,
// as before.
//
// A request answered without its whole body having been read (an early
// answer: 401, 421, a GET that takes no body, 413) is answered with
// Connection: close, and the connection is closed as soon as the answer is
// out. Go's server would otherwise try to drain what is left before it
// answers or reuses the connection, and a body that never comes would hold
// the answer, or the connection, until the read deadline.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBody(r) {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		// Only a writer without a connection (a test recorder) refuses.
		_ = rc.SetReadDeadline(time.Now().Add(s.bodyTimeout))
		body := &watchedBody{ReadCloser: r.Body}
		r = r.WithContext(r.Context())
		r.Body = body
		next.ServeHTTP(&closeUnread{ResponseWriter: w, body: body}, r)
		if !body.eof.Load() {
			// The answer is written; the server's drain of the rest
			// fails at once and the connection closes after the answer.
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// watchedBody records whether a request body was read to its end.
type watchedBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof.Store(true)
	}
	return n, err
}

// closeUnread adds Connection: close to an answer written while its
// request's body is not read to its end. It keeps Flush and Unwrap working
// so server-sent events and http.ResponseController still do.
type closeUnread struct {
	http.ResponseWriter
	body        *watchedBody
	wroteHeader bool
}

func (w *closeUnread) header() {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	if !w.body.eof.Load() {
		w.ResponseWriter.Header().Set("Connection", "close")
	}
}

func (w *closeUnread) WriteHeader(code int) {
	if code >= 200 { // an interim answer (103) is not the answer
		w.header()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeUnread) Write(p []byte) (int, error) {
	w.header()
	return w.ResponseWriter.Write(p)
}

func (w *closeUnread) Flush() {
	w.header()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *closeUnread) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// limitBody reads bodies of up to s.maxBody bytes into memory and answers 413
// for anything larger, and 408 for a body not received within the deadline
// bodyDeadline set, before the validator or a handler sees a byte of it.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBody(r) {
			next.ServeHTTP(w, r)
			return
		}
		if isFilesPath(r.URL.Path) && !takesNoBody(r.Method) {
			// The file routes stream their bodies, bounded by
			// files.maxUploadBytes (uploadBody).
			next.ServeHTTP(w, r)
			return
		}
		if takesNoBody(r.Method) {
			// No operation reads a body with this method. Leave it unread
			// and close the connection after the answer (bodyDeadline), so
			// that nothing of it is read as a next request, nor waited for.
			w.Header().Set("Connection", "close")
			r.Body, r.ContentLength = http.NoBody, 0
			next.ServeHTTP(w, r)
			return
		}
		body, ok := s.readBody(w, r)
		if !ok {
			return
		}
		if len(body) > 0 && isJSON(r.Header.Get("Content-Type")) {
			if err := checkJSON(body); err != nil {
				s.writeError(w, r, fmt.Errorf("%w: %v", errInvalidJSON, err))
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// readBody reads r's body of up to s.maxBody bytes and lifts the read
// deadline bodyDeadline set. When it cannot (too large, too slow, broken),
// it answers r and returns false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > s.maxBody {
		s.writeError(w, r, errBodyTooLarge)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			s.writeError(w, r, errBodyTooLarge)
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The connection cannot be read any more: close it.
			w.Header().Set("Connection", "close")
			s.writeError(w, r, errBodyTimeout)
		default:
			s.writeError(w, r, fmt.Errorf("%w: %v", errBadRequest, err))
		}
		return nil, false
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, true
}

// takesNoBody reports whether no operation with this method takes a request
// body (RFC 9110 gives a body no meaning with these methods).
func takesNoBody(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// isJSON reports whether a Content-Type names JSON (application/json or a
// +json type); the validator decides what happens to every other type.
func isJSON(contentType string) bool {
	if contentType == "application/json" { // what nearly every client sends
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// checkJSON accepts exactly one JSON value (RFC 8259) and nothing after it
// but whitespace: valid UTF-8, no lone surrogate escapes, no duplicate
// member names. encoding/json, which decodes bodies after this, would
// replace bad text with U+FFFD, keep the last of duplicate members and
// ignore a second value, so the command that ran would not be the one that
// was sent.
func checkJSON(body []byte) error {
	if jsontext.Value(body).IsValid() { // the same checks, on a pooled decoder
		return nil
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if _, err := dec.ReadValue(); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("data after the JSON value at byte %d", dec.InputOffset())
	}
	return nil
}

// closeChunked closes the connection after answering a request whose body
// is chunked. RFC 9112 (section 6.1) requires that of a request carrying
// both Content-Length and Transfer-Encoding, a request-smuggling shape; Go's
// server drops the Content-Length before a handler sees it, so the two
// cannot be told apart and every chunked request gets it. Clients that know
// their body's length (curl, browsers, most libraries) send Content-Length
// and keep their connection.
func (s *Server) closeChunked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// checkHost answers 421 host_not_allowed to a request whose Host is not one
// this server answers to, before anything else, open routes included: a
// page of another site that reaches the port by DNS rebinding names its own
// host.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			s.writeError(w, r, fmt.Errorf("%w: %q", errHostNotAllowed, r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed accepts localhost and loopback addresses, with any port, and
// the extra hosts the server was given.
func (s *Server) hostAllowed(host string) bool {
	if s.anyHost {
		return true
	}
	host = normalizeHost(host)
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return host != "" && slices.Contains(s.hosts, host)
}

// normalizeHost strips the port and IPv6 brackets from a Host value and
// lower-cases it.
func normalizeHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
}

// Policies of the browser-facing headers. The UI's policy is the one its
// page also declares in a meta tag, plus what only a header can say.
// Styles may be inline: the terminal view's xterm.js writes its theme and
// cell sizes into <style> elements and style attributes it makes. Scripts
// stay the UI's own, and no style can load anything from elsewhere
// (img-src, font-src and connect-src allow only this server).
const (
	uiCSP  = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	apiCSP = "default-src 'none'; frame-ancestors 'none'"
)

// secureHeaders makes every response unframeable and unsniffable and keeps
// URLs (which may carry ids) out of Referer headers; UI pages may load only
// their own scripts and styles and talk only to this server.
func (s *Server) secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if isUI(r.URL.Path) {
			h.Set("Content-Security-Policy", uiCSP)
		} else {
			h.Set("Content-Security-Policy", apiCSP)
		}
		next.ServeHTTP(w, r)
	})
}

// isUI reports whether p is a path of the UI (its files or the redirects to it).
func isUI(p string) bool { return p == "/" || p == "/ui" || strings.HasPrefix(p, "/ui/") }

// isOpen reports whether a request may go without a token: liveness, the
// contract, the static UI files (which hold no data; the UI's own API calls
// carry its session) and the UI's sign-in and sign-out (whose body, or
// cookie, is the credential).
func isOpen(r *http.Request) bool {
	p := r.URL.Path
	if p == uiSessionPath && (r.Method == http.MethodPost || r.Method == http.MethodDelete) {
		return true
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	return p == "/healthz" || p == "/openapi.yaml" || p == "/openapi.json" || isUI(p)
}

// authenticate requires "Authorization: Bearer <token>", the token compared
// in constant time, or, without that header, a UI session (see
// sessionAuth). The scheme is matched without regard to case (RFC 9110
// §11.1), as some clients, MCP clients among them, send "bearer". The
// request's context records which was given (authFrom).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isOpen(r) {
			next.ServeHTTP(w, r)
			return
		}
		method := authBearer
		ok, present := s.bearerOK(r)
		var err error = errUnauthorized
		if !present {
			if err = s.sessionAuth(r); err == nil {
				ok, method = true, authSession
			}
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dshd"`)
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authKey{}, method)))
	})
}
