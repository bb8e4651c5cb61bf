package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster/status"
)

// Agents are kept in one JetStream stream every replica shares,
// AgentsStream, with two subjects per agent:
//
//   - TranscriptSubjectPrefix + id: the agent's transcript lines, header
//     first. Every append names the sequence of the subject's last message
//     (Nats-Expected-Last-Subject-Sequence), so appends of two writers
//     cannot interleave or duplicate;
//   - HeaderSubjectPrefix + id: the header line again (with the agent's
//     root and home replica), written once the transcript's first lines are
//     stored, on the condition that the subject is empty: a message there is
//     what makes an agent exist, and only one creation of an id succeeds.
//
// The stream does not allow direct gets: every read goes to the stream's
// leader, so a read that follows a write (through any replica) sees it.
const (
	AgentsStream            = "DSHD_AGENTS"
	TranscriptSubjectPrefix = "dshd.transcript."
	HeaderSubjectPrefix     = "dshd.agent."
)

// journal is the agents.Journal of a Node.
type journal struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

var _ agents.Journal = (*journal)(nil)

// Journal returns the store of agents and transcripts every replica
// shares, creating its stream when it does not exist.
func (n *Node) Journal(ctx context.Context) (agents.Journal, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ConnectTimeout)
	defer cancel()
	j := &journal{js: n.js}
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		j.stream, err = n.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        AgentsStream,
			Description: "dshd agents: dshd.transcript.<id> holds an agent's transcript lines, header first; dshd.agent.<id> its header, once it exists",
			Subjects:    []string{TranscriptSubjectPrefix + "*", HeaderSubjectPrefix + "*"},
			Storage:     jetstream.FileStorage,
			Replicas:    n.cfg.StoreReplicas,
			// Transcripts are append-only: nothing deletes a line.
			DenyDelete: true,
			DenyPurge:  true,
			// Reads go to the leader (see above).
			AllowDirect: false,
		})
		if err == nil {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: agents store: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("cluster: agents store: %w", err)
}

func transcriptSubject(id string) string { return TranscriptSubjectPrefix + id }
func headerSubject(id string) string     { return HeaderSubjectPrefix + id }

// unavailable wraps err, a failure to reach the store.
func unavailable(what, id string, err error) error {
	return fmt.Errorf("%s %s: %w: %w", what, id, status.ErrAgentStoreUnavailable, err)
}

func (j *journal) Create(ctx context.Context, id string, lines [][]byte) (uint64, error) {
	if len(lines) == 0 {
		return 0, fmt.Errorf("create agent %s: no header line", id)
	}
	var last uint64
	for i, line := range lines {
		ack, err := j.js.Publish(ctx, transcriptSubject(id), line,
			jetstream.WithExpectLastSequencePerSubject(last),
			jetstream.WithMsgID(fmt.Sprintf("%s/%d", id, i)))
		if err != nil {
			if isWrongLastSeq(err) {
				return 0, fmt.Errorf("create agent %s: the id has a transcript already: %w", id, agents.ErrConflict)
			}
			return 0, unavailable("create agent", id, err)
		}
		last = ack.Sequence
	}
	if _, err := j.js.Publish(ctx, headerSubject(id), lines[0], jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		if isWrongLastSeq(err) {
			return 0, fmt.Errorf("create agent %s: the id exists: %w", id, agents.ErrConflict)
		}
		return 0, unavailable("create agent", id, err)
	}
	return last, nil
}

func (j *journal) Append(ctx context.Context, id string, line []byte, after uint64) (uint64, error) {
	ack, err := j.js.Publish(ctx, transcriptSubject(id), line, jetstream.WithExpectLastSequencePerSubject(after))
	if err != nil {
		if isWrongLastSeq(err) {
			return 0, fmt.Errorf("append to %s: %w", id, agents.ErrConflict)
		}
		return 0, unavailable("append to", id, err)
	}
	return ack.Sequence, nil
}

func (j *journal) Last(ctx context.Context, id string) ([]byte, uint64, error) {
	m, err := j.stream.GetLastMsgForSubject(ctx, transcriptSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, fmt.Errorf("agent %s: %w", id, agents.ErrNotFound)
	}
	if err != nil {
		return nil, 0, unavailable("read transcript of", id, err)
	}
	return m.Data, m.Sequence, nil
}

// Read reads the transcript line by line (each the next message of the
// subject, from the leader) up to the line that was last when Read began:
// lines appended meanwhile are left for the next read, as a file read
// would.
func (j *journal) Read(ctx context.Context, id string) ([][]byte, uint64, error) {
	if _, err := j.Header(ctx, id); err != nil {
		return nil, 0, err
	}
	_, last, err := j.Last(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	var lines [][]byte
	for seq := uint64(1); seq <= last; {
		m, err := j.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(transcriptSubject(id)))
		if err != nil {
			return nil, 0, unavailable("read transcript of", id, err)
		}
		lines = append(lines, m.Data)
		seq = m.Sequence + 1
	}
	return lines, last, nil
}

func (j *journal) Header(ctx context.Context, id string) ([]byte, error) {
	m, err := j.stream.GetLastMsgForSubject(ctx, headerSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("agent %s: %w", id, agents.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable("read agent", id, err)
	}
	return m.Data, nil
}

// Headers lists the header subjects, then reads each header.
func (j *journal) Headers(ctx context.Context) ([][]byte, error) {
	info, err := j.stream.Info(ctx, jetstream.WithSubjectFilter(HeaderSubjectPrefix+"*"))
	if err != nil {
		return nil, unavailable("list", "agents", err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		subjects = append(subjects, subj)
	}
	slices.Sort(subjects)
	out := make([][]byte, 0, len(subjects))
	for _, subj := range subjects {
		m, err := j.stream.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			return nil, unavailable("read agent", strings.TrimPrefix(subj, HeaderSubjectPrefix), err)
		}
		out = append(out, m.Data)
	}
	return out, nil
}

// isWrongLastSeq reports whether err is JetStream's answer to a publish
// whose expected last sequence was not the last (codes 10071, or 10164 on
// replicated streams).
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
