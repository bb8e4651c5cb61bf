package shellenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Collect resolves the managed overlay for one execution from one snapshot
// of the registry: it is never a mix of states before and after a
// concurrent change, and it never blocks writers. The overlay is sorted by
// key and holds DSH_HOME, DSH_SHELL, DSH_SESSION_ID (when x has an agent)
// and the values of every live contributor. A static key without a value,
// or a template naming a fact absent for x, is left out.
//
// All webhook contributors are called concurrently under one deadline
// (Options.WebhookTimeout; a contributor's own Timeout may shorten its
// share). If any fails — transport error, non-2xx status, invalid JSON,
// a body over MaxWebhookResponse, an undeclared key, a non-string value or
// one with a NUL byte, a timeout or a cancelled ctx — Collect returns a
// *ResolutionError (matching ErrResolution) naming the contributor, and no
// overlay. Without webhook contributors Collect starts no goroutine and
// performs no I/O.
func (r *Registry) Collect(ctx context.Context, x Execution) (Overlay, error) {
	s := r.snap.Load()
	check, nowNano := r.expiryCheck(s)

	var hooked map[*entry]map[string]string
	if len(s.webhooks) > 0 {
		var err error
		if hooked, err = r.runWebhooks(ctx, s, &x, check, nowNano); err != nil {
			return Overlay{}, err
		}
	}

	f := newFacts(&x)
	kvs := make([]KV, 0, len(s.slots))
	for i := range s.slots {
		sl := &s.slots[i]
		if check && sl.e.expired(nowNano) {
			continue
		}
		switch sl.kind {
		case slotStatic:
			kvs = append(kvs, KV{sl.key, sl.value})
		case slotTemplate:
			if v, ok := sl.tmpl.render(&f); ok {
				kvs = append(kvs, KV{sl.key, v})
			}
		case slotSession:
			if x.Agent != nil && x.Agent.ID != "" {
				kvs = append(kvs, KV{sl.key, x.Agent.ID})
			}
		case slotWebhook:
			if v, ok := hooked[sl.e][sl.key]; ok {
				kvs = append(kvs, KV{sl.key, v})
			}
		}
	}
	return Overlay{kvs: kvs}, nil
}

// Causes used to tell why a webhook call's context ended.
var (
	errSharedDeadline = errors.New("webhook deadline")
	errOwnDeadline    = errors.New("contributor deadline")
	errSiblingFailed  = errors.New("another webhook failed")
)

type webhookRequest struct {
	Contributor string          `json:"contributor"`
	Keys        []string        `json:"keys"`
	Execution   json.RawMessage `json:"execution"`
}

type webhookExecution struct {
	JobID      string        `json:"jobId"`
	Command    string        `json:"command"`
	Cwd        string        `json:"cwd"`
	Background bool          `json:"background"`
	Agent      *webhookAgent `json:"agent"`
}

type webhookAgent struct {
	ID       string `json:"id"`
	ParentID string `json:"parentId"`
	RootID   string `json:"rootId"`
	Cwd      string `json:"cwd"`
	Depth    int    `json:"depth"`
}

// runWebhooks calls every live webhook contributor of s concurrently and
// returns their values by entry. The first failure cancels the others.
func (r *Registry) runWebhooks(ctx context.Context, s *snapshot, x *Execution, check bool, nowNano int64) (map[*entry]map[string]string, error) {
	hooks := s.webhooks
	if check {
		hooks = slices.DeleteFunc(slices.Clone(hooks), func(e *entry) bool { return e.expired(nowNano) })
	}
	if len(hooks) == 0 {
		return nil, nil
	}
	wx := webhookExecution{JobID: x.JobID, Command: x.Command, Cwd: x.Cwd, Background: x.Background}
	if a := x.Agent; a != nil {
		wx.Agent = &webhookAgent{ID: a.ID, ParentID: a.ParentID, RootID: a.Root(), Cwd: a.Cwd, Depth: a.Depth}
	}
	execJSON, err := json.Marshal(wx)
	if err != nil {
		return nil, fmt.Errorf("encode execution: %w", err)
	}

	ctx, cancelDeadline := context.WithTimeoutCause(ctx, r.webhookTimeout, errSharedDeadline)
	defer cancelDeadline()
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)

	results := make([]map[string]string, len(hooks))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first *ResolutionError
	)
	for i, e := range hooks {
		wg.Go(func() {
			vals, reason := r.callWebhook(ctx, e, execJSON)
			if reason == "" {
				results[i] = vals
				return
			}
			if errors.Is(context.Cause(ctx), errSiblingFailed) {
				return // cancelled because another webhook failed first
			}
			mu.Lock()
			defer mu.Unlock()
			if first == nil {
				first = &ResolutionError{Contributor: e.pub.Name, Reason: reason}
				abort(errSiblingFailed)
			}
		})
	}
	wg.Wait()
	if first != nil {
		r.metrics.failures.WithLabelValues(first.Contributor).Inc()
		r.logger.Warn("environment resolution failed", "contributor", first.Contributor, "reason", first.Reason, "job_id", x.JobID)
		return nil, first
	}
	out := make(map[*entry]map[string]string, len(hooks))
	for i, e := range hooks {
		out[e] = results[i]
	}
	return out, nil
}

// callWebhook calls one webhook. It returns the values, or a non-empty
// reason for failure.
func (r *Registry) callWebhook(ctx context.Context, e *entry, execJSON []byte) (vals map[string]string, reason string) {
	start := time.Now()
	defer func() {
		r.metrics.latency.WithLabelValues(e.pub.Name).Observe(time.Since(start).Seconds())
	}()
	limit := r.webhookTimeout
	if t := e.pub.Resolver.Timeout; t > 0 && t < limit {
		limit = t
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, errOwnDeadline)
		defer cancel()
	}
	failed := func(what string, err error) string {
		if ctx.Err() != nil {
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errSharedDeadline), errors.Is(cause, errOwnDeadline):
				return fmt.Sprintf("timed out after %s", limit)
			default:
				return fmt.Sprintf("cancelled: %v", cause)
			}
		}
		return fmt.Sprintf("%s: %v", what, err)
	}

	body, err := json.Marshal(webhookRequest{Contributor: e.pub.Name, Keys: e.keys, Execution: execJSON})
	if err != nil {
		return nil, fmt.Sprintf("encode request: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.pub.Resolver.URL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Sprintf("build request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "dshd")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, failed("request failed", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Sprintf("webhook answered %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxWebhookResponse+1))
	if err != nil {
		return nil, failed("read response", err)
	}
	if len(data) > MaxWebhookResponse {
		return nil, fmt.Sprintf("response body exceeds %d bytes", MaxWebhookResponse)
	}
	return decodeWebhookValues(data, e.keys)
}

// decodeWebhookValues parses a webhook response: a JSON object mapping
// declared keys to strings without NUL bytes.
func decodeWebhookValues(data []byte, declared []string) (map[string]string, string) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Sprintf("invalid JSON response: %v", err)
	}
	if raw == nil {
		return nil, "response is not a JSON object"
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make(map[string]string, len(raw))
	for _, k := range keys {
		if _, ok := slices.BinarySearch(declared, k); !ok {
			return nil, fmt.Sprintf("undeclared key %q in response", k)
		}
		v := bytes.TrimSpace(raw[k])
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, fmt.Sprintf("value of %s is not a string", k)
		}
		if bytes.IndexByte([]byte(s), 0) >= 0 {
			return nil, fmt.Sprintf("value of %s contains a NUL byte", k)
		}
		vals[k] = s
	}
	return vals, ""
}
