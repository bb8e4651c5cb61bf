package proc

import (
	"log/slog"
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
	ahead madeAhead[spare]
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
	return &spares{ahead: madeAhead[spare]{
		want: sparesWanted,
		make: func() (spare, error) {
			id := newID()
			g, err := mgr.Create(id, cgroup.Limits{})
			if err == nil {
				if err = g.KeepStats(); err != nil {
					_ = g.Remove()
				}
			}
			return spare{id: id, g: g, made: time.Now()}, err
		},
		drop: func(sp spare) { _ = sp.g.Remove() },
		failed: func(err error) {
			// Jobs make their own groups meanwhile, and report why they
			// cannot; the next refill tries again.
			log.Debug("containment: a spare job group could not be made", "err", err)
		},
	}}
}

// take returns the oldest spare whose id sorts after last and which is
// younger than spareMaxAge, or "" and nil if there is none; the older ones
// are removed. The group is the caller's: it removes it when its job does
// not start. The caller serialises takes (the executor's lock), so that
// last is the last id handed out, and calls refill once its job is
// spawned.
func (s *spares) take(last string) (string, *cgroup.Group) {
	if s == nil {
		return "", nil
	}
	now := time.Now()
	sp, ok := s.ahead.take(func(sp spare) bool { return sp.id > last && now.Sub(sp.made) < spareMaxAge })
	if !ok {
		return "", nil
	}
	return sp.id, sp.g
}

// refill has the filler make groups until sparesWanted are ready. It is
// called once a job has been spawned, not when its spare is taken: a mkdir
// in cgroupfs holds the lock that a clone into a cgroup takes too, so a
// group made during a spawn would delay it.
func (s *spares) refill() {
	if s != nil {
		s.ahead.refill()
	}
}

// close removes the spares and waits for the filler and removals to end.
func (s *spares) close() {
	if s != nil {
		s.ahead.close()
	}
}
