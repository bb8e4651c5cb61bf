package proc

import "sync"

// madeAhead keeps up to want values ready that a command would otherwise
// wait for (a job's cgroup, its output pipes): make builds one, on a
// goroutine of its own that refill starts once a command is spawned, so
// that the making never runs beside a spawn; drop disposes of one never
// handed out. Values are handed out oldest first.
type madeAhead[T any] struct {
	want int
	make func() (T, error) // on error it leaves nothing behind
	drop func(T)
	// failed hears why make failed; the filler stops until the next
	// refill, and commands make their own meanwhile.
	failed func(error)

	mu      sync.Mutex
	ready   []T // oldest first
	filling bool
	closed  bool
	wg      sync.WaitGroup
}

// take returns the oldest ready value that keep accepts, and drops on a
// goroutine of its own the older ones it refuses. It reports false if none
// is accepted.
func (m *madeAhead[T]) take(keep func(T) bool) (T, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var refused []T
	for len(m.ready) > 0 {
		v := m.ready[0]
		var zero T
		m.ready[0] = zero
		m.ready = m.ready[1:]
		if keep == nil || keep(v) {
			m.dropLocked(refused)
			return v, true
		}
		refused = append(refused, v)
	}
	m.dropLocked(refused)
	var zero T
	return zero, false
}

func (m *madeAhead[T]) dropLocked(vs []T) {
	if len(vs) > 0 {
		m.wg.Go(func() {
			for _, v := range vs {
				m.drop(v)
			}
		})
	}
}

// refill has the filler make values until want are ready.
func (m *madeAhead[T]) refill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.filling && !m.closed && len(m.ready) < m.want {
		m.filling = true
		m.wg.Go(m.fill)
	}
}

func (m *madeAhead[T]) fill() {
	for {
		m.mu.Lock()
		if m.closed || len(m.ready) >= m.want {
			m.filling = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		v, err := m.make()
		m.mu.Lock()
		if err != nil || m.closed {
			m.filling = false
			m.mu.Unlock()
			if err != nil {
				m.failed(err)
			} else {
				m.drop(v)
			}
			return
		}
		m.ready = append(m.ready, v)
		m.mu.Unlock()
	}
}

// close drops the values ready once the filler and the drops under way
// have ended; a take after it begins finds none.
func (m *madeAhead[T]) close() {
	m.mu.Lock()
	m.closed = true
	ready := m.ready
	m.ready = nil
	m.mu.Unlock()
	m.wg.Wait()
	for _, v := range ready {
		m.drop(v)
	}
}
