package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dshd/dshd/internal/agents"
	clusterstatus "github.com/dshd/dshd/internal/cluster/status"
)

// callLedger makes a tool call with a caller's call id run at most once on
// this replica (an agent's calls all run at its home): a retry of a call
// that ran answers its result again without running anything, a retry of
// a call still running waits for it. It also keeps the results that ran
// but could not be written to the shared transcript store (cluster mode,
// store unreachable): each is written as soon as the store is back, before
// anything else of its agent, never replaced by an interrupted result
// while this process lives.
type callLedger struct {
	mu      sync.Mutex
	calls   map[ledgerKey]*ledgerCall
	unsaved map[string][]unsavedResult // agent → results not written yet, in order
	// loaded are the agents whose transcript was read for the calls
	// recorded before this process (a retry after a restart).
	loaded  map[string]bool
	writing sync.Mutex // held while results not written are written
}

type ledgerKey struct{ agent, call string }

// ledgerCall is one call: done closes when res and err are final.
type ledgerCall struct {
	done     chan struct{}
	res      CallResult
	err      error
	at       time.Time // when it finished; zero while it runs
	recorded bool      // its tool/call is in the transcript: it ran, or may have
	gone     bool      // it was not recorded and is forgotten: a retry runs it
}

type unsavedResult struct {
	callID string
	data   resultEvent
}

// ledgerKeep is how long a finished call's result is kept for retries;
// ledgerMax bounds how many are kept.
const (
	ledgerKeep = time.Hour
	ledgerMax  = 65536
)

// unsavedRetry is how often the results not written are tried again.
const unsavedRetry = time.Second

// begin claims call id for agent. When the call ran or runs already it
// returns its result (waiting for it, as long as ctx lets it) and true.
func (l *callLedger) begin(ctx context.Context, agent, id string) (CallResult, bool, error) {
	k := ledgerKey{agent, id}
	for {
		l.mu.Lock()
		if l.calls == nil {
			l.calls = map[ledgerKey]*ledgerCall{}
		}
		c, ok := l.calls[k]
		if !ok {
			l.sweep()
			l.calls[k] = &ledgerCall{done: make(chan struct{})}
			l.mu.Unlock()
			return CallResult{}, false, nil
		}
		l.mu.Unlock()
		select {
		case <-c.done:
			if c.gone {
				continue // it did not run: this one does
			}
			return c.res, true, c.err
		case <-ctx.Done():
			return CallResult{}, true, ctx.Err()
		}
	}
}

// fromTranscript fills the ledger, the first time agent is seen by this
// process, with the calls its transcript holds: a call recorded before a
// restart answers its recorded result (an interrupted one included) when
// retried, rather than running again. A call the transcript marks as not
// run (notRun) is left out: a retry runs it.
func (s *Service) fromTranscript(ctx context.Context, agent string) error {
	l := &s.ledger
	l.mu.Lock()
	done := l.loaded[agent]
	l.mu.Unlock()
	if done {
		return nil
	}
	r, ok := s.agents.(eventReader)
	if !ok {
		return nil
	}
	evs, err := r.Events(ctx, agent)
	if err != nil {
		return err
	}
	type past struct {
		res     CallResult
		settled bool
		notRun  bool
	}
	calls := map[string]*past{}
	for _, ev := range evs {
		var d struct {
			CallID string `json:"callId"`
			resultEvent
			NotRun bool `json:"notRun"`
		}
		if (ev.Type != agents.EventToolCall && ev.Type != agents.EventToolResult) || json.Unmarshal(ev.Data, &d) != nil || d.CallID == "" {
			continue
		}
		if ev.Type == agents.EventToolCall {
			// Recorded, no result yet: it ran, or may have (an interrupted
			// result follows when this home restarted).
			calls[d.CallID] = &past{res: CallResult{CallID: d.CallID, IsError: true, Text: agents.InterruptedText}}
			continue
		}
		if p, ok := calls[d.CallID]; ok {
			p.res = CallResult{CallID: d.CallID, IsError: d.IsError, Text: d.Text, JobID: d.JobID, ExitCode: d.ExitCode,
				Sandbox: d.Sandbox, Network: d.Network.record(), AdditionalContext: d.AdditionalContext, SystemMessages: d.SystemMessages}
			p.settled, p.notRun = true, d.NotRun
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded == nil {
		l.loaded = map[string]bool{}
	}
	if l.calls == nil {
		l.calls = map[ledgerKey]*ledgerCall{}
	}
	if l.loaded[agent] {
		return nil
	}
	l.loaded[agent] = true
	now := time.Now()
	for id, p := range calls {
		k := ledgerKey{agent, id}
		if _, ok := l.calls[k]; ok || p.notRun {
			continue
		}
		c := &ledgerCall{done: make(chan struct{}), res: p.res, at: now, recorded: true}
		close(c.done)
		l.calls[k] = c
	}
	return nil
}

// recorded marks the call's tool/call as stored: from then on it counts as
// run, whatever happens to it.
func (l *callLedger) recorded(agent, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.calls[ledgerKey{agent, id}]; ok {
		c.recorded = true
	}
}

// end settles the call: one whose tool/call was not stored did not run and
// is forgotten (a retry runs it); any other keeps its answer for retries.
func (l *callLedger) end(agent, id string, res CallResult, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := ledgerKey{agent, id}
	c, ok := l.calls[k]
	if !ok || !c.at.IsZero() {
		return
	}
	c.at = time.Now()
	if !c.recorded {
		c.gone = true
		delete(l.calls, k)
	} else {
		c.res, c.err = res, err
	}
	close(c.done)
}

// sweep, when the ledger is full, drops the finished calls past
// ledgerKeep, or else the oldest tenth of them, so that a full ledger is
// swept once per ledgerMax/10 calls (l.mu held).
func (l *callLedger) sweep() {
	if len(l.calls) < ledgerMax {
		return
	}
	var done []time.Time
	for k, c := range l.calls {
		switch {
		case c.at.IsZero(): // running
		case time.Since(c.at) > ledgerKeep:
			delete(l.calls, k)
		default:
			done = append(done, c.at)
		}
	}
	if len(l.calls) < ledgerMax*9/10 || len(done) == 0 {
		return
	}
	slices.SortFunc(done, func(a, b time.Time) int { return a.Compare(b) })
	cut := done[min(len(done)-1, ledgerMax/10)]
	for k, c := range l.calls {
		if !c.at.IsZero() && !c.at.After(cut) {
			delete(l.calls, k)
		}
	}
}

// storeDown reports whether err says the shared transcript store could
// not be reached (the result may be written later).
func storeDown(err error) bool { return errors.Is(err, clusterstatus.ErrAgentStoreUnavailable) }

// CallWith is Call with options: the same pipeline, recording and errors.
// A call runs at most once here per call id, the caller's or the one
// generated for a call sent without one (see callLedger): a retry with
// either answers as the first did.
func (s *Service) CallWith(ctx context.Context, agentID, name, callID string, args json.RawMessage, o CallOptions) (CallResult, error) {
	if callID == "" {
		// Claimed like a given one: the caller learns it from the answer
		// (and the transcript) and may retry with it.
		callID = s.ids.New("call_")
	}
	if err := s.fromTranscript(ctx, agentID); err != nil && !errors.Is(err, agents.ErrNotFound) {
		return CallResult{}, fmt.Errorf("tool call %s: read the calls recorded for agent %s: %w", name, agentID, err)
	}
	if res, ok, err := s.ledger.begin(ctx, agentID, callID); ok {
		return res, err
	}
	res, err := s.callWith(ctx, agentID, name, callID, args, o)
	s.ledger.end(agentID, callID, res, err)
	return res, err
}

// keepUnsaved holds a result that could not be written, and writes it (with the
// others of its agent, in order) once the store is back.
func (s *Service) keepUnsaved(agent, callID string, data resultEvent) {
	l := &s.ledger
	l.mu.Lock()
	if l.unsaved == nil {
		l.unsaved = map[string][]unsavedResult{}
	}
	first := len(l.unsaved[agent]) == 0
	l.unsaved[agent] = append(l.unsaved[agent], unsavedResult{callID, data})
	l.mu.Unlock()
	if s.kept != "" {
		// Kept on disk too: a restart before the store is back writes it
		// instead of an interrupted result.
		raw, _ := json.Marshal(data)
		if err := agents.KeepResult(s.kept, agents.KeptResult{Agent: agent, CallID: callID, Data: raw}); err != nil {
			s.log.Warn("tool result not kept on disk", "agent_id", agent, "call_id", callID, "err", err)
		}
	}
	s.log.Warn("tool result not written to the transcript store; kept to be written when it is back", "agent_id", agent, "call_id", callID)
	if first {
		go s.writeUnsavedLoop(agent)
	}
}

func (s *Service) writeUnsavedLoop(agent string) {
	for {
		time.Sleep(unsavedRetry)
		if s.writeUnsaved(context.Background(), agent) == nil {
			return
		}
	}
}

// writeUnsaved writes agent's results that could not be written, in
// order; it returns nil when none is left. A result the store took after
// all (its answer was lost) is not written again.
func (s *Service) writeUnsaved(ctx context.Context, agent string) error {
	s.ledger.mu.Lock()
	none := len(s.ledger.unsaved[agent]) == 0
	s.ledger.mu.Unlock()
	if none {
		return nil
	}
	s.ledger.writing.Lock()
	defer s.ledger.writing.Unlock()
	for {
		s.ledger.mu.Lock()
		q := s.ledger.unsaved[agent]
		if len(q) == 0 {
			delete(s.ledger.unsaved, agent)
			s.ledger.mu.Unlock()
			return nil
		}
		u := q[0]
		s.ledger.mu.Unlock()
		stored, err := s.resultStored(ctx, agent, u.callID)
		if err != nil {
			return err
		}
		if !stored {
			if err := s.record(ctx, agent, agents.EventToolResult, u.data); err != nil {
				return err
			}
			s.log.Info("tool result written once the transcript store was back", "agent_id", agent, "call_id", u.callID)
		}
		_ = agents.DropKeptResult(s.kept, agent, u.callID)
		s.ledger.mu.Lock()
		s.ledger.unsaved[agent] = s.ledger.unsaved[agent][1:]
		s.ledger.mu.Unlock()
	}
}

// eventReader reads a transcript's events (*agents.Store).
type eventReader interface {
	Events(ctx context.Context, id string) ([]agents.Event, error)
}

// resultStored reports whether the transcript of agent holds a tool/result
// for call id.
func (s *Service) resultStored(ctx context.Context, agent, id string) (bool, error) {
	r, ok := s.agents.(eventReader)
	if !ok {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	evs, err := r.Events(ctx, agent)
	if err != nil {
		return false, err
	}
	for _, ev := range evs {
		if ev.Type != agents.EventToolResult {
			continue
		}
		var d struct {
			CallID string `json:"callId"`
		}
		if json.Unmarshal(ev.Data, &d) == nil && d.CallID == id {
			return true, nil
		}
	}
	return false, nil
}
