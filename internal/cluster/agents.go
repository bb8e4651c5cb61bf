package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

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
// What must see every acknowledged write (a header, the last line of a
// transcript) is read from the stream's leader. A transcript's lines up to
// that last one are read in batches from whichever server answers (direct
// gets); a server that has not caught up yet answers fewer lines, and the
// rest are read from the leader.
const (
	AgentsStream            = "DSHD_AGENTS"
	TranscriptSubjectPrefix = "dshd.transcript."
	HeaderSubjectPrefix     = "dshd.agent."
)

// journal is the agents.Journal of a Node.
type journal struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	online func() bool // Node.Online
}

// offline returns the error of a call made while the NATS connection is
// down (nothing is sent), or nil.
func (j *journal) offline(what, id string) error {
	if j.online() {
		return nil
	}
	return unavailable(what, id, ErrNotConnected)
}

// msgGetRequest is a request of JetStream's message get API
// ($JS.API.STREAM.MSG.GET.<stream>), which the stream's leader answers.
type msgGetRequest struct {
	Seq           uint64 `json:"seq,omitempty"`
	NextBySubject string `json:"next_by_subj,omitempty"`
	LastBySubject string `json:"last_by_subj,omitempty"`
}

// msgGetResponse is its answer.
type msgGetResponse struct {
	Message *struct {
		Subject  string `json:"subject"`
		Sequence uint64 `json:"seq"`
		Data     []byte `json:"data"`
	} `json:"message"`
	Error *jetstream.APIError `json:"error"`
}

// storedMsg is a message read from the leader.
type storedMsg struct {
	Sequence uint64
	Data     []byte
}

// leaderGet reads one message from the stream's leader. (The client's own
// get goes to any server when the stream allows direct gets.) A missing
// message is jetstream.ErrMsgNotFound.
func (j *journal) leaderGet(ctx context.Context, req msgGetRequest) (storedMsg, error) {
	if !j.online() {
		return storedMsg{}, ErrNotConnected
	}
	body, err := json.Marshal(req)
	if err != nil {
		return storedMsg{}, err
	}
	prefix := j.js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	msg, err := j.js.Conn().RequestWithContext(ctx, prefix+"STREAM.MSG.GET."+AgentsStream, body)
	if err != nil {
		return storedMsg{}, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return storedMsg{}, fmt.Errorf("message get answer: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return storedMsg{}, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return storedMsg{}, resp.Error
	case resp.Message == nil:
		return storedMsg{}, errors.New("message get answer without a message")
	}
	return storedMsg{Sequence: resp.Message.Sequence, Data: resp.Message.Data}, nil
}

var _ agents.Journal = (*journal)(nil)

// Journal returns the store of agents and transcripts every replica
// shares, creating its stream when it does not exist.
func (n *Node) Journal(ctx context.Context) (agents.Journal, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ConnectTimeout)
	defer cancel()
	j := &journal{js: n.js, online: n.Online}
	cfg := jetstream.StreamConfig{
		Name:        AgentsStream,
		Description: "dshd agents: dshd.transcript.<id> holds an agent's transcript lines, header first; dshd.agent.<id> its header, once it exists",
		Subjects:    []string{TranscriptSubjectPrefix + "*", HeaderSubjectPrefix + "*"},
		Storage:     jetstream.FileStorage,
		Replicas:    n.cfg.StoreReplicas,
		// Transcripts are append-only: nothing deletes a line.
		DenyDelete: true,
		DenyPurge:  true,
		// Batched reads of transcript lines (see above).
		AllowDirect: true,
	}
	var err error
	j.stream, err = createWithRetry(ctx, "agents store", func(ctx context.Context) (jetstream.Stream, error) {
		return n.js.CreateOrUpdateStream(ctx, cfg)
	})
	if err != nil {
		return nil, err
	}
	return j, nil
}

func transcriptSubject(id string) string { return TranscriptSubjectPrefix + id }
func headerSubject(id string) string     { return HeaderSubjectPrefix + id }

// storeTimeout bounds every call of the journal whose context has no
// deadline of its own: past it the store counts as unreachable.
const storeTimeout = StoreTimeout

// bounded returns ctx with storeTimeout when it has no deadline.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, storeTimeout)
}

// unavailable wraps err, a failure to reach the store.
func unavailable(what, id string, err error) error {
	return fmt.Errorf("%s %s: %w: %w", what, id, status.ErrAgentStoreUnavailable, err)
}

// Create bounds each of its writes by storeTimeout, not all of them: a
// fork copies its parent's events, however many.
func (j *journal) Create(ctx context.Context, id string, lines [][]byte) (uint64, error) {
	if len(lines) == 0 {
		return 0, fmt.Errorf("create agent %s: no header line", id)
	}
	publish := func(subj string, line []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
		if !j.online() {
			return nil, ErrNotConnected
		}
		ctx, cancel := bounded(ctx)
		defer cancel()
		return j.js.Publish(ctx, subj, line, opts...)
	}
	var last uint64
	for i, line := range lines {
		ack, err := publish(transcriptSubject(id), line,
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
	if _, err := publish(headerSubject(id), lines[0], jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		if isWrongLastSeq(err) {
			return 0, fmt.Errorf("create agent %s: the id exists: %w", id, agents.ErrConflict)
		}
		return 0, unavailable("create agent", id, err)
	}
	return last, nil
}

func (j *journal) Append(ctx context.Context, id string, line []byte, after uint64) (uint64, error) {
	if err := j.offline("append to", id); err != nil {
		return 0, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
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
	if err := j.offline("read transcript of", id); err != nil {
		return nil, 0, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := j.leaderGet(ctx, msgGetRequest{LastBySubject: transcriptSubject(id)})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, fmt.Errorf("agent %s: %w", id, agents.ErrNotFound)
	}
	if err != nil {
		return nil, 0, unavailable("read transcript of", id, err)
	}
	return m.Data, m.Sequence, nil
}

// readBatch is how many transcript lines one read request asks for.
const readBatch = 256

// Read reads the transcript up to the line that was last when Read began:
// lines appended meanwhile are left for the next read, as a file read
// would.
func (j *journal) Read(ctx context.Context, id string) ([][]byte, uint64, error) {
	if err := j.offline("read transcript of", id); err != nil {
		return nil, 0, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	if _, err := j.Header(ctx, id); err != nil {
		return nil, 0, err
	}
	_, last, err := j.Last(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	subj := transcriptSubject(id)
	var lines [][]byte
	for next := uint64(1); next <= last; {
		if got, err := j.readBatch(ctx, subj, next, last, &lines); err == nil && got > 0 {
			next = got + 1
			continue
		}
		// No server answered with line next: the one that answered has not
		// caught up to it yet, or none serves direct gets (yet). The
		// leader has it.
		m, err := j.leaderGet(ctx, msgGetRequest{Seq: next, NextBySubject: subj})
		if err != nil {
			return nil, 0, unavailable("read transcript of", id, err)
		}
		lines = append(lines, m.Data)
		next = m.Sequence + 1
	}
	return lines, last, nil
}

// readBatch appends to lines the lines of subj from sequence from up to
// last, as many as one direct get answers, and returns the sequence of the
// last line it appended (0: none).
func (j *journal) readBatch(ctx context.Context, subj string, from, last uint64, lines *[][]byte) (uint64, error) {
	msgs, err := jetstreamext.GetBatch(ctx, j.js, AgentsStream, readBatch,
		jetstreamext.GetBatchSeq(from), jetstreamext.GetBatchSubject(subj))
	if err != nil {
		return 0, err
	}
	var got uint64
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if err != nil {
			return 0, err
		}
		if m.Sequence > last {
			break
		}
		*lines = append(*lines, m.Data)
		got = m.Sequence
	}
	return got, nil
}

func (j *journal) Header(ctx context.Context, id string) ([]byte, error) {
	if err := j.offline("read agent", id); err != nil {
		return nil, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := j.leaderGet(ctx, msgGetRequest{LastBySubject: headerSubject(id)})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("agent %s: %w", id, agents.ErrNotFound)
	}
	if err != nil {
		return nil, unavailable("read agent", id, err)
	}
	return m.Data, nil
}

// headersBatch is how many headers one read request asks for.
const headersBatch = 256

// Headers lists the header subjects on the leader, reads their messages in
// batches from whichever server answers (direct gets), and the ones a
// server that has not caught up lacks from the leader.
func (j *journal) Headers(ctx context.Context) ([][]byte, error) {
	if err := j.offline("list", "agents"); err != nil {
		return nil, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	info, err := j.stream.Info(ctx, jetstream.WithSubjectFilter(HeaderSubjectPrefix+"*"))
	if err != nil {
		return nil, unavailable("list", "agents", err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		subjects = append(subjects, subj)
	}
	slices.Sort(subjects)
	found := make(map[string][]byte, len(subjects))
	for chunk := range slices.Chunk(subjects, headersBatch) {
		msgs, err := jetstreamext.GetLastMsgsFor(ctx, j.js, AgentsStream, chunk)
		if err != nil {
			continue // the leader answers for these below
		}
		for m, err := range msgs {
			if err != nil {
				break
			}
			found[m.Subject] = m.Data
		}
	}
	out := make([][]byte, 0, len(subjects))
	for _, subj := range subjects {
		data, ok := found[subj]
		if !ok {
			m, err := j.leaderGet(ctx, msgGetRequest{LastBySubject: subj})
			if err != nil {
				return nil, unavailable("read agent", strings.TrimPrefix(subj, HeaderSubjectPrefix), err)
			}
			data = m.Data
		}
		out = append(out, data)
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
