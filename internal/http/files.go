package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/dshd/dshd/internal/files"
	"github.com/dshd/dshd/internal/run"
)

// DefaultMaxUploadBytes bounds an upload to the file routes when
// Deps.MaxUploadBytes is 0: 1 GiB.
const DefaultMaxUploadBytes = 1 << 30

// fileService gives the file routes an agent's scope (run.Service).
type fileService interface {
	FileScope(ctx context.Context, agentID string) (*files.Scope, func(), error)
	OnViewRemount(agentID string, fn func(fd int)) (cancel func())
}

var _ fileService = (*run.Service)(nil)

// The file routes are hand-served: their {path} holds slashes, which no
// contract path parameter matches; the contract declares them all the
// same, and its operations are left out of the generated router.
const (
	filesRoute   = "/agents/{id}/files/*"
	archiveRoute = "/agents/{id}/archive/*"
)

// isFilesPath reports whether p is one of the file routes' paths.
func isFilesPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/agents/")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, "/")
	return ok && (strings.HasPrefix(rest, "files/") || strings.HasPrefix(rest, "archive/"))
}

// filePath is the {path} of a file route: what follows /files/ or
// /archive/ in the decoded path, so that an absolute path is sent as
// files//etc/hosts or files/%2Fetc%2Fhosts.
func filePath(r *http.Request) string {
	rest := strings.TrimPrefix(r.URL.Path, "/agents/")
	_, rest, _ = strings.Cut(rest, "/")
	_, rest, _ = strings.Cut(rest, "/")
	return rest
}

// mountFiles mounts the file routes.
func (s *Server) mountFiles(r chi.Router) {
	r.Get(filesRoute, s.fileRoute(s.getFile))
	r.Put(filesRoute, s.fileRoute(s.putFile))
	r.Delete(filesRoute, s.fileRoute(s.deleteFile))
	r.Post(filesRoute, s.fileRoute(s.postFile))
	r.Get(archiveRoute, s.fileRoute(s.getArchive))
	r.Put(archiveRoute, s.fileRoute(s.putArchive))
}

// fileRoute gives h the agent's scope, and writes its error.
func (s *Server) fileRoute(h func(w http.ResponseWriter, r *http.Request, sc *files.Scope, p string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := s.withScope(w, r, h)
		var body *bodyError
		if errors.As(err, &body) {
			// The request's body broke off: the client's doing.
			var tooBig *http.MaxBytesError
			switch {
			case errors.Is(err, errForwardRefused):
				// A forwarded upload whose body did not verify: nothing
				// was written.
				err = body.err
			case errors.As(err, &tooBig):
				err = fmt.Errorf("%w: over %d bytes (files.maxUploadBytes)", errBodyTooLarge, tooBig.Limit)
				drainRefused(w, r)
			case errors.Is(err, os.ErrDeadlineExceeded):
				// The connection cannot be read any more: close it.
				w.Header().Set("Connection", "close")
				err = errBodyTimeout
			default:
				err = fmt.Errorf("%w: reading the body: %v", errBadRequest, body.err)
			}
		}
		if err != nil {
			s.writeError(w, r, err)
		}
	}
}

func (s *Server) withScope(w http.ResponseWriter, r *http.Request, h func(w http.ResponseWriter, r *http.Request, sc *files.Scope, p string) error) error {
	if err := checkQuery(r, allowedQuery[r.Method+" "+routeKind(r)]); err != nil {
		return err
	}
	// The contract's bound, checked whether or not the request watches.
	if last := r.Header.Get("Last-Event-ID"); len(last) > maxLastEventID {
		return fmt.Errorf("%w: Last-Event-ID is %d bytes, over %d", errBadRequest, len(last), maxLastEventID)
	}
	if r.Method == http.MethodGet && routeKind(r) == "files" && r.URL.Query().Has("watch") && r.URL.Query().Get("watch") != "false" {
		// A watch holds no scope while it streams (see watchFiles).
		return s.watchFiles(w, r, chi.URLParam(r, "id"), filePath(r))
	}
	sc, release, err := s.files.FileScope(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	defer release()
	return h(w, r, sc, filePath(r))
}

// maxLastEventID is the longest Last-Event-ID a file route takes (the
// contract's maxLength).
const maxLastEventID = 64

// routeKind is "archive" or "files": which of the two routes r is.
func routeKind(r *http.Request) string {
	_, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/agents/"), "/")
	if strings.HasPrefix(rest, "archive/") {
		return "archive"
	}
	return "files"
}

// allowedQuery are the query parameters each route takes.
var allowedQuery = map[string][]string{
	"GET files":     {"depth", "stat", "watch", "recursive"},
	"PUT files":     {"mode", "parents"},
	"DELETE files":  {"recursive"},
	"POST files":    {"op", "mode", "parents", "to", "overwrite"},
	"GET archive":   {},
	"PUT archive":   {"parents"},
	"HEAD files":    {},
	"OPTIONS files": {},
}

func checkQuery(r *http.Request, allowed []string) error {
	for k := range r.URL.Query() {
		if !contains(allowed, k) {
			return fmt.Errorf("%w: unknown query parameter %q", errBadRequest, k)
		}
	}
	return nil
}

func contains(l []string, v string) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q is not a boolean", errBadRequest, name, v)
	}
	return b, nil
}

func modeQuery(r *http.Request) (fs.FileMode, error) {
	v := r.URL.Query().Get("mode")
	if v == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(v, 8, 32)
	if err != nil || m == 0 || m > 0o7777 {
		return 0, fmt.Errorf("%w: mode=%q is not an octal mode between 1 and 7777", errBadRequest, v)
	}
	return fs.FileMode(m & 0o777), nil
}

// fileEntry is a listing's entry, or a stat, on the wire.
type fileEntry struct {
	Path  string    `json:"path"`
	Type  string    `json:"type"`
	Size  int64     `json:"size"`
	Mode  string    `json:"mode"`
	MTime time.Time `json:"mtime"`
	Link  string    `json:"link,omitempty"`
}

func toFileEntry(e files.Entry) fileEntry {
	return fileEntry{Path: e.Path, Type: e.Type, Size: e.Size, Mode: octal(e.Mode), MTime: e.MTime.UTC(), Link: e.Link}
}

func octal(m fs.FileMode) string {
	v := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

// getFile: a file's bytes (ranges too), a directory's listing, or with
// stat=true what the path is.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request, sc *files.Scope, p string) error {
	depth := files.DefaultDepth
	if v := r.URL.Query().Get("depth"); v != "" {
		d, err := strconv.Atoi(v)
		if err != nil || d < 1 || d > files.MaxDepth {
			return fmt.Errorf("%w: depth=%q must be between 1 and %d", errBadRequest, v, files.MaxDepth)
		}
		depth = d
	}
	stat, err := boolQuery(r, "stat")
	if err != nil {
		return err
	}
	t, err := sc.Open(p)
	if err != nil {
		return err
	}
	defer t.Close()
	if stat {
		writeJSON(w, http.StatusOK, map[string]any{"path": t.Path, "type": map[bool]string{true: "directory", false: "file"}[t.IsDir()],
			"size": t.Info.Size(), "mode": octal(t.Info.Mode()), "mtime": t.Info.ModTime().UTC()})
		return nil
	}
	if t.IsDir() {
		ents, truncated, err := sc.List(t, depth, files.MaxEntries)
		if err != nil {
			return err
		}
		out := make([]fileEntry, len(ents))
		for i, e := range ents {
			out[i] = toFileEntry(e)
		}
		writeJSON(w, http.StatusOK, map[string]any{"path": t.Path, "depth": depth, "entries": out, "truncated": truncated})
		return nil
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", t.Info.ModTime(), t.File)
	return nil
}

// putFile writes the body to a file.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request, sc *files.Scope, p string) error {
	mode, err := modeQuery(r)
	if err != nil {
		return err
	}
	parents, err := boolQuery(r, "parents")
	if err != nil {
		return err
	}
	body, err := s.uploadBody(w, r)
	if err != nil {
		return err
	}
	res, err := sc.Put(p, body, mode, parents)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"path": res.Path, "size": res.Size, "mode": octal(res.Mode)})
	return nil
}

// deleteFile removes a file, a link or a directory.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, sc *files.Scope, p string) error {
	recursive, err := boolQuery(r, "recursive")
	if err != nil {
		return err
	}
	if _, err := sc.Remove(p, recursive); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// postFile does op: mkdir, or move (to, overwrite).
func (s *Server) postFile(w http.ResponseWriter, r *http.Request, sc *files.Scope, p string) error {
	q := r.URL.Query()
	parents, err := boolQuery(r, "parents")
	if err != nil {
		return err
	}
	switch op := q.Get("op"); op {
	case "mkdir":
		if q.Has("to") || q.Has("overwrite") {
			return fmt.Errorf("%w: to and overwrite are move's", errBadRequest)
		}
		mode, err := modeQuery(r)
		if err != nil {
			return err
		}
		abs, err := sc.Mkdir(p, mode, parents)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, map[string]any{"path": abs})
		return nil
	case "move":
		if q.Has("mode") {
			return fmt.Errorf("%w: mode is mkdir's", errBadRequest)
		}
		if !q.Has("to") {
			return fmt.Errorf("%w: op=move needs to=<path>", errBadRequest)
		}
		overwrite, err := boolQuery(r, "overwrite")
		if err != nil {
			return err
		}
		m, err := sc.Move(p, q.Get("to"), overwrite, parents)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"from": m.From, "path": m.Path})
		return nil
	default:
		return fmt.Errorf("%w: op=%q: the operations are mkdir and move", errBadRequest, op)
	}
}

// getArchive streams a tree out as tar.
func (s *Server) getArchive(w http.ResponseWriter, r *http.Request, sc *files.Scope, p string) error {
	t, err := sc.Open(p)
	if err != nil {
		return err
	}
	defer t.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if err := sc.TarOut(w, t); err != nil {
		// The answer has begun: cut it, so that the client sees a broken
		// stream rather than a short archive.
		if r.Context().Err() != nil {
			s.logger.InfoContext(r.Context(), "client went away", "method", r.Method, "path", r.URL.Path, "err", err)
		} else {
			s.logger.ErrorContext(r.Context(), "archive stream failed", "path", r.URL.Path, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
	return nil
}

// putArchive unpacks a tar stream into a directory.
func (s *Server) putArchive(w http.ResponseWriter, r *http.Request, sc *files.Scope, p string) error {
	parents, err := boolQuery(r, "parents")
	if err != nil {
		return err
	}
	body, err := s.uploadBody(w, r)
	if err != nil {
		return err
	}
	res, err := sc.TarIn(p, body, parents, s.spool)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"path": res.Path, "entries": res.Entries, "bytes": res.Bytes})
	return nil
}

// drainLimit bounds what drainRefused reads of a refused body: the
// amount net/http itself reads of a body its handler left unread.
const drainLimit = 256 << 10

// drainRefused reads and discards what a client still sends of a body
// refused as too large, up to drainLimit and for at most a second, before
// the 413 is written and the connection closed: closed with its bytes
// unread, the connection is reset, and a client still writing sees a
// broken pipe instead of the answer.
func drainRefused(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, r.Body, drainLimit)
}

// uploadBody is the request's body, bounded by files.maxUploadBytes, with
// the body deadline renewed as it arrives (bodyTimeout bounds a pause,
// not the whole upload).
func (s *Server) uploadBody(w http.ResponseWriter, r *http.Request) (io.Reader, error) {
	if r.ContentLength > s.maxUpload {
		return nil, fmt.Errorf("%w: %d bytes, over %d (files.maxUploadBytes)", errBodyTooLarge, r.ContentLength, s.maxUpload)
	}
	return &renewing{r: http.MaxBytesReader(w, r.Body, s.maxUpload), rc: http.NewResponseController(w), every: s.bodyTimeout / 4, timeout: s.bodyTimeout}, nil
}

// renewing pushes the connection's read deadline on while a body arrives.
type renewing struct {
	r              io.Reader
	rc             *http.ResponseController
	last           time.Time
	every, timeout time.Duration
}

func (b *renewing) Read(p []byte) (int, error) {
	if now := time.Now(); now.Sub(b.last) > b.every {
		b.last = now
		_ = b.rc.SetReadDeadline(now.Add(b.timeout))
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		// All in: nothing bounds the time the handler takes now.
		_ = b.rc.SetReadDeadline(time.Time{})
	} else if err != nil {
		err = &bodyError{err}
	}
	return n, err
}

// bodyError is a failure to read the request's body (too large, too slow,
// cut off), told apart from the file system's errors.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }
