package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/dshd/dshd/internal/stages"
)

// stageClock carries the start of the current HTTP stage of a request
// through its context while a benchmark times the stages (package stages).
type stageClock struct{ t time.Time }

type stageClockKey struct{}

// timeStages starts the decode stage of every request, and ends the
// respond stage once the handler has written the response. Without a hook
// it only passes the request on.
func timeStages(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := stages.Start()
		if t0.IsZero() {
			next.ServeHTTP(w, r)
			return
		}
		c := &stageClock{t: t0}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stageClockKey{}, c)))
		if c.t != t0 {
			stages.Done(stages.Respond, c.t)
		}
	})
}

func stageClockOf(ctx context.Context) *stageClock {
	c, _ := ctx.Value(stageClockKey{}).(*stageClock)
	return c
}

// done ends stage s, begun at the clock's time.
func (c *stageClock) done(s stages.Stage) {
	if c != nil {
		c.t = stages.Done(s, c.t)
	}
}

// resumed ends the resume stage, begun when the job's end was signalled
// at doneAt (zero if unknown), and begins the respond stage.
func (c *stageClock) resumed(doneAt time.Time) {
	if c == nil {
		return
	}
	if !doneAt.IsZero() {
		stages.Done(stages.Resume, doneAt)
	}
	c.t = stages.Start()
}
