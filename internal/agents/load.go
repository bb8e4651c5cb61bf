package agents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// load reads <id>.jsonl: it checks the header, finds the last seq, reports
// lines that are not valid events, and repairs a torn tail (see the package
// comment). It returns an error only when the file cannot be read or its
// header is invalid; the caller skips such files.
func (s *Store) load(id string) (*entry, error) {
	path := s.Path(id)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)

	first, err := r.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(first) == 0 || first[len(first)-1] != '\n' {
		return nil, errors.New("header line is incomplete")
	}
	a, err := parseHeader(first[:len(first)-1], id)
	if err != nil {
		return nil, err
	}
	e := &entry{agent: a}

	var (
		off       = int64(len(first)) // end of what has been read
		validEnd  = off               // end of the last valid line
		needNL    bool                // the last valid line lacks its '\n'
		tornAfter int                 // invalid lines after the last valid one
		lineNo    = 1
	)
	for {
		line, rerr := r.ReadBytes('\n')
		if len(line) > 0 {
			lineNo++
			off += int64(len(line))
			terminated := line[len(line)-1] == '\n'
			body := bytes.TrimSuffix(line, []byte{'\n'})
			if ev, ok := parseEvent(body); ok {
				e.lastSeq = max(e.lastSeq, ev.Seq)
				e.pending = trackCall(e.pending, ev)
				validEnd, needNL, tornAfter = off, !terminated, 0
			} else if len(bytes.TrimSpace(body)) > 0 {
				tornAfter++
				s.metrics.tornLines.Inc()
				s.log.Warn("skipping torn transcript line", "file", path, "line", lineNo,
					"bytes", len(line), "terminated", terminated)
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				return nil, rerr
			}
			break
		}
	}
	e.size = off
	if validEnd < off || needNL {
		if err := s.repairTail(path, validEnd, needNL); err != nil {
			// Appending after an unrepaired torn tail would glue the next
			// event onto it; refusing the file is safer than that.
			return nil, fmt.Errorf("repair torn tail: %w", err)
		}
		e.size = validEnd
		if needNL {
			e.size++
		}
		s.log.Warn("repaired transcript tail", "file", path, "dropped_bytes", off-validEnd,
			"dropped_lines", tornAfter, "added_newline", needNL)
	}
	return e, nil
}

// repairTail truncates path to size and, when addNL is set, ends the last
// line with '\n', then fsyncs.
func (s *Store) repairTail(path string, size int64, addNL bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close()
		return err
	}
	if addNL {
		if _, err := f.WriteAt([]byte{'\n'}, size); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := s.syncFile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// parseHeader decodes and checks a header line for the file of agent id.
func parseHeader(line []byte, id string) (Agent, error) {
	var h header
	if err := json.Unmarshal(line, &h); err != nil {
		return Agent{}, fmt.Errorf("header: %w", err)
	}
	switch {
	case h.Type != headerType:
		return Agent{}, fmt.Errorf("header: type %q, want %q", h.Type, headerType)
	case h.Version != headerVer:
		return Agent{}, fmt.Errorf("header: unsupported version %d", h.Version)
	case h.ID != id:
		return Agent{}, fmt.Errorf("header: id %q does not match file name", h.ID)
	case !h.Origin.valid():
		return Agent{}, fmt.Errorf("header: unknown origin %q", h.Origin)
	case h.Depth < 0:
		return Agent{}, fmt.Errorf("header: negative depth %d", h.Depth)
	case h.CreatedAt.IsZero():
		return Agent{}, errors.New("header: missing createdAt")
	case (h.ParentID == nil || *h.ParentID == "") != (h.Origin == OriginRoot):
		return Agent{}, fmt.Errorf("header: origin %s with parentId %v", h.Origin, h.ParentID)
	}
	a := Agent{ID: h.ID, Cwd: h.Cwd, Origin: h.Origin, Depth: h.Depth, CreatedAt: h.CreatedAt.UTC()}
	if h.Sandbox != nil {
		if err := h.Sandbox.Validate(); err != nil {
			return Agent{}, fmt.Errorf("header: %w", err)
		}
		a.Sandbox = *h.Sandbox
	}
	if h.Limits != nil {
		if err := h.Limits.Validate(); err != nil {
			return Agent{}, fmt.Errorf("header: %w", err)
		}
		a.Limits = *h.Limits
	}
	if h.ParentID != nil {
		a.ParentID = *h.ParentID
	}
	return a, nil
}

// eventLines splits a transcript into its lines after the header, without
// their newlines. Blank lines are dropped.
func eventLines(data []byte) [][]byte {
	_, rest, _ := bytes.Cut(data, []byte{'\n'})
	var out [][]byte
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte{'\n'})
		if len(bytes.TrimSpace(line)) > 0 {
			out = append(out, line)
		}
	}
	return out
}

// parseEvent decodes one event line; ok is false if it is not a complete
// event with a type and a positive seq.
func parseEvent(line []byte) (Event, bool) {
	var ev Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return Event{}, false
	}
	if ev.Type == "" || ev.Seq < 1 || ev.Time.IsZero() || len(ev.Data) == 0 {
		return Event{}, false
	}
	return ev, true
}

// seqOf returns the seq of a raw event line, or 0.
func seqOf(line []byte) int64 {
	ev, _ := parseEvent(bytes.TrimSuffix(line, []byte{'\n'}))
	return ev.Seq
}

// trackCall updates the list of tool calls without a result with ev.
func trackCall(pending []string, ev Event) []string {
	if ev.Type != EventToolCall && ev.Type != EventToolResult {
		return pending
	}
	var d struct {
		CallID string `json:"callId"`
	}
	if json.Unmarshal(ev.Data, &d) != nil || d.CallID == "" {
		return pending // a call without an id cannot be answered or matched
	}
	if ev.Type == EventToolCall {
		return append(pending, d.CallID)
	}
	if i := slices.Index(pending, d.CallID); i >= 0 {
		return slices.Delete(pending, i, i+1)
	}
	return pending
}

// InterruptedText is the text of the result appended for a tool call that
// has none when its transcript is loaded: the server stopped while it ran.
const InterruptedText = "[interrupted: the server stopped before this call finished; its outcome is unknown]"

// interruptedResult is the data of that tool/result event.
type interruptedResult struct {
	CallID      string `json:"callId"`
	IsError     bool   `json:"isError"`
	Text        string `json:"text"`
	Interrupted bool   `json:"interrupted"`
}

// closeInterrupted appends a tool/result for every tool call of e that has
// none, so a model reading the transcript is never left waiting for one.
// It runs when a transcript is loaded, before anything else can append.
func (s *Store) closeInterrupted(e *entry) {
	pending := e.pending
	e.pending = nil
	for _, id := range pending {
		var data any = interruptedResult{CallID: id, IsError: true, Text: InterruptedText, Interrupted: true}
		kept, ok := s.keptResult(e.agent.ID, id)
		if ok {
			// It ran and its result was kept here: that is its result.
			data = kept
		}
		ctx, cancel := context.WithTimeout(context.Background(), journalTimeout)
		_, err := s.append(ctx, e, EventToolResult, data)
		cancel()
		if err != nil {
			s.log.Warn("record interrupted tool call", "agent_id", e.agent.ID, "call_id", id, "err", err)
			return
		}
		if ok {
			_ = DropKeptResult(s.keptDir, e.agent.ID, id)
			s.log.Info("recorded the kept result of a tool call", "agent_id", e.agent.ID, "call_id", id)
			continue
		}
		s.log.Info("recorded interrupted tool call", "agent_id", e.agent.ID, "call_id", id)
	}
}
