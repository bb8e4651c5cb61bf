package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster/status"
)

// Agents are kept in two JetStream objects every replica shares:
//
//   - the stream TranscriptStream, one subject per agent
//     (TranscriptSubjectPrefix + id), whose messages are the agent's
//     transcript lines, header first. Every append names the sequence of
//     the subject's last message (Nats-Expected-Last-Subject-Sequence), so
//     appends of two writers cannot interleave or duplicate;
//   - the bucket AgentsBucket, agent id → header line (with the agent's
//     root and home replica), written once the transcript's first lines are
//     stored: a key there is what makes an agent exist.
const (
	TranscriptStream        = "DSHD_TRANSCRIPTS"
	TranscriptSubjectPrefix = "dshd.transcript."
	AgentsBucket            = "dshd_agents"
)

// journal is the agents.Journal of a Node.
type journal struct {
	js      jetstream.JetStream
	stream  jetstream.Stream
	headers jetstream.KeyValue
}

var _ agents.Journal = (*journal)(nil)

// Journal returns the store of agents and transcripts every replica
// shares, creating its stream and bucket when they do not exist.
func (n *Node) Journal(ctx context.Context) (agents.Journal, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ConnectTimeout)
	defer cancel()
	j := &journal{js: n.js}
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		j.stream, err = n.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:        TranscriptStream,
			Description: "dshd agent transcripts: one subject per agent, header line first",
			Subjects:    []string{TranscriptSubjectPrefix + "*"},
			Storage:     jetstream.FileStorage,
			Replicas:    n.cfg.StoreReplicas,
			// Transcripts are append-only: nothing deletes a line.
			DenyDelete:  true,
			DenyPurge:   true,
			AllowDirect: true,
		})
		if err == nil {
			j.headers, err = n.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket:      AgentsBucket,
				Description: "dshd agent headers: agent id → header line with root and home replica",
				History:     1,
				Storage:     jetstream.FileStorage,
				Replicas:    n.cfg.StoreReplicas,
			})
		}
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

func subject(id string) string { return TranscriptSubjectPrefix + id }

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
		ack, err := j.js.Publish(ctx, subject(id), line,
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
	if _, err := j.headers.Create(ctx, id, lines[0]); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("create agent %s: the id exists: %w", id, agents.ErrConflict)
		}
		return 0, unavailable("create agent", id, err)
	}
	return last, nil
}

func (j *journal) Append(ctx context.Context, id string, line []byte, after uint64) (uint64, error) {
	ack, err := j.js.Publish(ctx, subject(id), line, jetstream.WithExpectLastSequencePerSubject(after))
	if err != nil {
		if isWrongLastSeq(err) {
			return 0, fmt.Errorf("append to %s: %w", id, agents.ErrConflict)
		}
		return 0, unavailable("append to", id, err)
	}
	return ack.Sequence, nil
}

func (j *journal) Last(ctx context.Context, id string) ([]byte, uint64, error) {
	m, err := j.stream.GetLastMsgForSubject(ctx, subject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, fmt.Errorf("agent %s: %w", id, agents.ErrNotFound)
	}
	if err != nil {
		return nil, 0, unavailable("read transcript of", id, err)
	}
	return m.Data, m.Sequence, nil
}

// Read reads the transcript with an ordered consumer up to the line that
// was last when Read began: lines appended meanwhile are left for the
// next read, as a file read would.
func (j *journal) Read(ctx context.Context, id string) ([][]byte, uint64, error) {
	if _, err := j.Header(ctx, id); err != nil {
		return nil, 0, err
	}
	_, last, err := j.Last(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	cons, err := j.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject(id)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, 0, unavailable("read transcript of", id, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, 0, unavailable("read transcript of", id, err)
	}
	defer it.Stop()
	var lines [][]byte
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, 0, unavailable("read transcript of", id, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, 0, unavailable("read transcript of", id, err)
		}
		lines = append(lines, m.Data())
		if md.Sequence.Stream >= last {
			return lines, md.Sequence.Stream, nil
		}
	}
}

func (j *journal) Header(ctx context.Context, id string) ([]byte, error) {
	e, err := j.headers.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, fmt.Errorf("agent %s: %w", id, agents.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable("read agent", id, err)
	}
	return e.Value(), nil
}

func (j *journal) Headers(ctx context.Context) ([][]byte, error) {
	w, err := j.headers.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, unavailable("list", "agents", err)
	}
	defer w.Stop()
	var out [][]byte
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, unavailable("list", "agents", errors.New("watch ended"))
			}
			if e == nil {
				return out, nil // every current value has been delivered
			}
			out = append(out, e.Value())
		case <-ctx.Done():
			return nil, unavailable("list", "agents", ctx.Err())
		}
	}
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
