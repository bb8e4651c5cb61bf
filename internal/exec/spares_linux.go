package exec

import (
	"log/slog"
	"sync"
	"time"

	"github.com/dshd/dshd/internal/cgroup"
)

// Spare job groups. Making a job's cgroup (a mkdir in cgroupfs, which
// builds the group's files, and opening it) costs tens of microseconds, and
// a foreground command waits for it before it can start. So the executor
// makes a few groups ahead of their jobs, on a goroutine of their own, each
// named by the job id it is made for, as every job group is
// (<subtree>/<job id>): a job registered without an id of its own takes the
// oldest spare's id and group. What a spare holds is nothing: a crash leaves
// empty groups, which the next start removes with the other leftovers.
//
// Ids stay in the order jobs were registered: a spare whose id sorts before
// the last id handed out (a fresh id was drawn while it was being made) is
// passed over. And an id says when its job was registered to within
// spareMaxAge: an older spare is passed over too. Spares passed over are
// removed.
const (
	// sparesWanted is how many groups are kept ready: enough for a burst of
	// concurrent requests while the filler makes more.
	sparesWanted = 4
	// spareMaxAge bounds how long before its job a spare (and so its id)
	// was made.
	spareMaxAge = 2 * time.Second
)

// spares are the job groups made ahead. The zero of *spares (nil) has none:
// group mode, or an executor whose jobs' ids are given.
type spares struct {
	mgr   *cgroup.Manager
	newID func() string
	log   *slog.Logger

	mu      sync.Mutex
	ready   []spare // oldest first
	filling bool
	closed  bool
	wg      sync.WaitGroup
}

type spare struct {
	id   string
	g    *cgroup.Group
	made time.Time
}

func newSpares(mgr *cgroup.Manager, newID func() string, log *slog.Logger) *spares {
	if mgr == nil {
		return nil
	}
	return &spares{mgr: mgr, newID: newID, log: log}
}

// take returns the oldest spare whose id sorts after last and which is
// younger than spareMaxAge, or "" and nil if there is none. The group is
// the caller's: it removes it when its job does not start. The caller
// serialises takes (the executor's lock), so that last is the last id
// handed out, and calls refill once its job is spawned.
func (s *spares) take(last string) (string, *cgroup.Group) {
	if s == nil {
		return "", nil
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var got spare
	var stale []*cgroup.Group
	for len(s.ready) > 0 && got.g == nil {
		sp := s.ready[0]
		s.ready = s.ready[1:]
		if sp.id > last && now.Sub(sp.made) < spareMaxAge {
			got = sp
		} else {
			stale = append(stale, sp.g)
		}
	}
	if len(stale) > 0 {
		s.wg.Go(func() { removeSpares(stale) })
	}
	return got.id, got.g
}

// refill has the filler make groups until sparesWanted are ready. It is
// called once a job has been spawned, not when its spare is taken: a mkdir
// in cgroupfs holds the lock that a clone into a cgroup takes too, so a
// group made during a spawn would delay it.
func (s *spares) refill() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.filling && !s.closed && len(s.ready) < sparesWanted {
		s.filling = true
		s.wg.Go(s.fill)
	}
}

// fill makes groups until sparesWanted are ready.
func (s *spares) fill() {
	for {
		s.mu.Lock()
		if s.closed || len(s.ready) >= sparesWanted {
			s.filling = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		id := s.newID()
		g, err := s.mgr.Create(id, cgroup.Limits{})
		if err == nil {
			if err = g.KeepStats(); err != nil {
				_ = g.Remove()
			}
		}
		s.mu.Lock()
		if err != nil || s.closed {
			// Jobs make their own groups meanwhile, and report why they
			// cannot; the next take tries again.
			s.filling = false
			s.mu.Unlock()
			if err != nil {
				s.log.Debug("containment: a spare job group could not be made", "err", err)
			} else {
				_ = g.Remove()
			}
			return
		}
		s.ready = append(s.ready, spare{id: id, g: g, made: time.Now()})
		s.mu.Unlock()
	}
}

// close removes the spares and waits for the filler and removals to end.
func (s *spares) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	gs := make([]*cgroup.Group, 0, len(s.ready))
	for _, sp := range s.ready {
		gs = append(gs, sp.g)
	}
	s.ready = nil
	s.mu.Unlock()
	s.wg.Wait()
	removeSpares(gs)
}

func removeSpares(gs []*cgroup.Group) {
	for _, g := range gs {
		_ = g.Remove()
	}
}
