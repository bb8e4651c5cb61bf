package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/dshd/dshd/internal/files"
)

// watchEvent is a watch's event on the wire.
type watchEvent struct {
	Type   string `json:"type"`
	Path   string `json:"path,omitempty"`
	From   string `json:"from,omitempty"`
	IsDir  bool   `json:"isDir,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// watchBatch bounds the events one read of a watch's ring takes.
const watchBatch = 256

// watchFiles streams the changes below a directory of the agent's view as
// server-sent events (GET …/files/{path}?watch=true, recursive=true for
// the whole tree). Clients of the same directory share one watch; each
// event's id names the watch and the event, and a client that reconnects
// with Last-Event-ID gets what it missed while the watch keeps it, or an
// overflow event first when it cannot (the watch was let go, or the ring
// moved past). The scope, and with it the lease on the agent's view, is
// held only while the watch is set up: a watch never keeps a checkpoint,
// a fork or an apply of the view waiting.
func (s *Server) watchFiles(w http.ResponseWriter, r *http.Request, agent, p string) error {
	watch, err := boolQuery(r, "watch")
	if err != nil {
		return err
	}
	if !watch {
		return fmt.Errorf("%w: watch=%q is not a boolean", errBadRequest, r.URL.Query().Get("watch"))
	}
	recursive, err := boolQuery(r, "recursive")
	if err != nil {
		return err
	}
	if q := r.URL.Query(); q.Has("depth") || q.Has("stat") {
		return fmt.Errorf("%w: depth and stat are not a watch's", errBadRequest)
	}
	sc, release, err := s.files.FileScope(r.Context(), agent)
	if err != nil {
		return err
	}
	defer release()
	abs, err := sc.Abs(p)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("%s\x00%s\x00%t", agent, abs, recursive)
	var (
		wt     *files.Watch
		leave  func()
		cursor uint64
		lost   string
	)
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		id, seq, ok := files.ParseEventID(last)
		if !ok {
			return fmt.Errorf("%w: Last-Event-ID %q is not <watch>.<seq>", errBadRequest, last)
		}
		if wt, leave, ok = s.watches.Resume(id, key); ok {
			cursor = seq
		} else {
			lost = "the watch the client resumes is no longer kept: what changed meanwhile is not known"
		}
	}
	if wt == nil {
		wt, leave, err = s.watches.Open(key, func() (*files.Watch, error) {
			nw, err := sc.Watch(p, recursive, func() (*files.Scope, func(), error) {
				return s.files.FileScope(context.WithoutCancel(r.Context()), agent)
			})
			if err != nil {
				return nil, err
			}
			nw.OnClose(s.files.OnViewRemount(agent, nw.Remounted))
			return nw, nil
		})
		if err != nil {
			return err
		}
		cursor = wt.Last()
	}
	defer leave()
	release()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ew := &eventWriter{w: w, rc: http.NewResponseController(w)}
	ew.out = append(ew.out, "retry: 1000\n\n"...)
	if lost != "" {
		ew.out = appendWatchEvent(ew.out, wt.ID, cursor, watchEvent{Type: files.Overflow, Reason: lost})
	}
	if err := s.streamWatch(r.Context(), ew, wt, cursor); err != nil {
		s.logger.DebugContext(r.Context(), "watch stream ended", "path", abs, "err", err)
	}
	return nil
}

// streamWatch writes wt's events after cursor until the watch ends or the
// client leaves. A client slower than the ring is told by an overflow
// event, and goes on from the oldest event kept.
func (s *Server) streamWatch(ctx context.Context, ew *eventWriter, wt *files.Watch, cursor uint64) error {
	idle := time.NewTimer(s.keepAlive)
	defer idle.Stop()
	for {
		evs, lost, changed, ended := wt.Since(cursor, watchBatch)
		if lost {
			first := cursor
			if len(evs) > 0 {
				first = evs[0].Seq - 1
			}
			ew.out = appendWatchEvent(ew.out, wt.ID, first, watchEvent{Type: files.Overflow, Reason: "the client fell behind the watch's ring of recent events"})
		}
		for _, e := range evs {
			ew.out = appendWatchEvent(ew.out, wt.ID, e.Seq, watchEvent{Type: e.Type, Path: e.Path, From: e.From, IsDir: e.IsDir, Reason: e.Reason})
			cursor = e.Seq
		}
		if err := ew.send(true); err != nil {
			return err
		}
		if ended {
			return nil
		}
		if len(evs) == watchBatch {
			continue
		}
		idle.Reset(s.keepAlive)
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", errClientGone, context.Cause(ctx))
		case <-idle.C:
			ew.out = append(ew.out, ": keep-alive\n\n"...)
		}
	}
}

// appendWatchEvent appends one event named by its type, with id
// <watch>.<seq>.
func appendWatchEvent(out []byte, id string, seq uint64, e watchEvent) []byte {
	b, _ := json.Marshal(e)
	out = append(out, "id: "...)
	out = append(out, files.EventID(id, seq)...)
	out = append(out, "\nevent: "...)
	out = append(out, strings.ReplaceAll(e.Type, "\n", "")...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}
