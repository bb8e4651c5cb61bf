package workspace

// An op is what holds one agent's workspace while its files are worked on
// without the Manager's lock: readers (a listing of its changes) share it;
// a writer (a fork freezing its layer, an apply into or out of its view, a
// drop) holds it alone, and while one does, none of the agent's jobs
// starts (Acquire waits). Work on one agent's files never holds another
// agent, so no job start waits on another agent's workspace work.
//
// An apply holds its source and then the parent it writes to: always a
// child before its parent, so two holders never wait on each other.
type op struct {
	readers int
	writer  bool
}

// lockOpLocked waits (releasing mu meanwhile) until agent may be held as
// asked, then holds it. Call with mu held.
func (m *Manager) lockOpLocked(agent string, exclusive bool) {
	for {
		o := m.ops[agent]
		if o == nil {
			o = &op{}
			m.ops[agent] = o
		}
		// A writer also waits for a checkpoint's mounts to settle: it
		// changes the layers they stand on.
		if !o.writer && (!exclusive || o.readers == 0 && !m.preparing[agent]) {
			if exclusive {
				o.writer = true
			} else {
				o.readers++
			}
			return
		}
		m.cond.Wait()
	}
}

// unlockOpLocked gives back what lockOpLocked took. Call with mu held.
func (m *Manager) unlockOpLocked(agent string, exclusive bool) {
	o := m.ops[agent]
	if exclusive {
		o.writer = false
	} else {
		o.readers--
	}
	if !o.writer && o.readers == 0 {
		delete(m.ops, agent)
	}
	m.cond.Broadcast()
}

// writingLocked reports whether a writer holds agent.
func (m *Manager) writingLocked(agent string) bool {
	o := m.ops[agent]
	return o != nil && o.writer
}

// hold holds agent's live workspace (ErrNotFound, ErrDropped otherwise) to
// read (exclusive false) or to change it, and returns its state as it is
// then and the release.
func (m *Manager) hold(agent string, exclusive bool) (*agentState, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.liveLocked(agent); err != nil {
		return nil, nil, err
	}
	m.lockOpLocked(agent, exclusive)
	// Dropped, perhaps, while this waited.
	a, err := m.liveLocked(agent)
	if err != nil {
		m.unlockOpLocked(agent, exclusive)
		return nil, nil, err
	}
	return a, func() {
		m.mu.Lock()
		m.unlockOpLocked(agent, exclusive)
		m.mu.Unlock()
	}, nil
}
