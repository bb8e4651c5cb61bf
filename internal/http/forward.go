package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/dshd/dshd/internal/agents"
	"github.com/dshd/dshd/internal/cluster/status"
	"github.com/dshd/dshd/internal/exec"
	"github.com/dshd/dshd/internal/mcp"
)

// jobRouter says where a job runs and where an agent lives (cluster mode
// only; *cluster.Node).
type jobRouter interface {
	// JobOwner returns the base URL of the replica that runs job id, or
	// nil when this replica does (or the id names no replica). Errors
	// wrap status.ErrOwnerUnavailable.
	JobOwner(id string) (*url.URL, error)
	// AgentHome is the same for the replica that holds agent id. Errors
	// wrap status.ErrAgentHomeUnavailable.
	AgentHome(id string) (*url.URL, error)
	// SessionHome is the same for the replica that holds MCP session id.
	// Errors wrap status.ErrSessionHomeUnavailable.
	SessionHome(id string) (*url.URL, error)
	// ClaimKey claims the Idempotency-Key of a request that names no
	// agent, before anything runs, and returns the base URL and id of the
	// replica that holds it (nil: this one). Errors wrap
	// status.ErrOwnerUnavailable or status.ErrClaimUnavailable.
	ClaimKey(ctx context.Context, key string) (*url.URL, string, error)
}

// forwardTarget is where a forwarded request goes, and the error that
// says its replica could not be reached.
type forwardTarget struct {
	url         *url.URL
	unavailable error
	replica     string // the replica's id (its address when no id names it)
	body        []byte // the request's body, signed with it
	streamed    bool   // an upload: its body is sent as it arrives (signPeerStreamed)
	callID      string // a tool call's id (given, or set here), for "may have run"
}

// headersSetHere are the response headers this replica's middleware has
// already set on a forwarded request's answer; the owner's copies are
// dropped so each appears once.
var headersSetHere = []string{"X-Content-Type-Options", "Referrer-Policy", "X-Frame-Options", "Content-Security-Policy", "X-Request-Id"}

// idFromPath returns the id of <prefix>{id} and <prefix>{id}/…, or "".
func idFromPath(p, prefix string) string {
	rest, ok := strings.CutPrefix(p, prefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// execAgentID returns the agentId of a POST /exec body. A body it cannot
// read as JSON names no agent: the server that serves it refuses it.
func execAgentID(body []byte) string {
	var b struct {
		AgentID string `json:"agentId"`
	}
	_ = json.Unmarshal(body, &b)
	return b.AgentID
}

// mcpSessionHeader carries an MCP session's id on every request after
// initialize (Streamable HTTP transport).
const mcpSessionHeader = "Mcp-Session-Id"

// mcpAgent returns the agent a request to the MCP endpoint names: the
// agentId query parameter, else the Dsh-Agent-Id header. (When both are
// given and differ, the replica that serves the request refuses it.)
func mcpAgent(r *http.Request) string {
	if id := r.URL.Query().Get(mcp.AgentQuery); id != "" {
		return id
	}
	return r.Header.Get(mcp.AgentHeader)
}

// agentRead reports whether r reads an agent (GET /agents/{id} or its
// transcript).
func agentRead(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	id := idFromPath(r.URL.Path, "/agents/")
	return id != "" && (r.URL.Path == "/agents/"+id || r.URL.Path == "/agents/"+id+"/transcript")
}

// route says where r goes: nil when it is served here.
func (s *Server) route(r *http.Request, body []byte, router jobRouter) (*forwardTarget, error) {
	var u *url.URL
	var err error
	var unavailable, notFound error
	var replica string
	switch {
	case idFromPath(r.URL.Path, "/jobs/") != "":
		id := idFromPath(r.URL.Path, "/jobs/")
		unavailable, notFound, replica = status.ErrOwnerUnavailable, exec.ErrJobNotFound, status.JobOwner(id)
		u, err = router.JobOwner(id)
	case r.Method == http.MethodGet && r.URL.Path == "/jobs" && r.URL.Query().Get("agentId") != "":
		// An agent's jobs all run at its home.
		id := r.URL.Query().Get("agentId")
		unavailable, notFound, replica = status.ErrAgentHomeUnavailable, agents.ErrNotFound, status.AgentOwner(id)
		u, err = router.AgentHome(id)
	case r.URL.Path == mcpPath:
		// A session lives on the replica that opened it; a new session
		// naming an agent is opened at the agent's home, where its
		// commands run.
		if sid := r.Header.Get(mcpSessionHeader); sid != "" {
			unavailable, notFound, replica = status.ErrSessionHomeUnavailable, errNotFound, status.MCPSessionOwner(sid)
			u, err = router.SessionHome(sid)
		} else if id := mcpAgent(r); id != "" {
			unavailable, notFound, replica = status.ErrAgentHomeUnavailable, agents.ErrNotFound, status.AgentOwner(id)
			u, err = router.AgentHome(id)
		}
	case agentRead(r):
		// Agents and transcripts are in the cluster's shared store: any
		// replica reads them, even while the agent's home is down.
		return nil, nil
	case idFromPath(r.URL.Path, "/agents/") != "":
		id := idFromPath(r.URL.Path, "/agents/")
		unavailable, notFound, replica = status.ErrAgentHomeUnavailable, agents.ErrNotFound, status.AgentOwner(id)
		u, err = router.AgentHome(id)
	case r.Method == http.MethodPost && r.URL.Path == "/exec":
		id := execAgentID(body)
		key := r.Header.Get("Idempotency-Key")
		switch {
		case id != "":
			unavailable, notFound, replica = status.ErrAgentHomeUnavailable, agents.ErrNotFound, status.AgentOwner(id)
			u, err = router.AgentHome(id)
		case key != "":
			// The replica that first saw the key serves it, so a retry
			// through any replica finds the job it started.
			unavailable = status.ErrOwnerUnavailable
			u, replica, err = router.ClaimKey(r.Context(), key)
		default:
			return nil, nil
		}
	}
	if errors.Is(err, status.ErrUnknownReplica) {
		if notFound != nil {
			// What the id names cannot exist anywhere.
			return nil, fmt.Errorf("%w: %w", notFound, err)
		}
		return nil, &status.UnavailableError{Replica: replica, Err: fmt.Errorf("%w: %w", unavailable, err)}
	}
	if err != nil || u == nil {
		return nil, err
	}
	if replica == "" {
		replica = u.Host
	}
	t := &forwardTarget{url: u, unavailable: unavailable, replica: replica, body: body}
	if r.Method == http.MethodPost && isToolCall(r.URL.Path) {
		t.body, t.callID = s.withCallID(body)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(t.body)), int64(len(t.body))
	}
	return t, nil
}

// newForwarder returns the middleware that sends to the replica concerned,
// in one hop, streaming both ways and flushing as it writes:
//   - every request for a job another replica runs (/jobs/{id} and
//     everything under it: state, long-polls, SSE and raw output, stdin,
//     cancel);
//   - every call for an agent whose home is another replica (tool calls,
//     fork, spawn, resume; POST /exec and GET /jobs naming the agent; a new
//     MCP session naming the agent);
//   - every request of an MCP session another replica opened;
//   - a POST /exec with an Idempotency-Key and no agent, to the replica that
//     claimed the key first in the cluster's shared store.
//
// Reads of an agent and its transcript are served where they land, from
// the shared store. The middleware runs after authentication (the owner
// checks the same token again) and before the contract's validator (the
// owner validates). A request whose replica is not available is answered
// 503 here (job_owner_unavailable, agent_home_unavailable,
// session_home_unavailable), and nothing is run elsewhere.
//
// A request that carries forwarding headers is never routed on: it is
// served here, marked so (servedForPeer, which answers with this replica's
// own state only), when peerGate admits it (signed with peerKey for this
// replica, after it started, nonce not seen before) and routing it would
// not send it elsewhere (its job, agent, session or Idempotency-Key claim,
// which it makes like any request, is this replica's). Any other is
// refused at once, 421 forward_refused, and nothing runs; the refusals of
// one sender are logged once a minute.
func (s *Server) newForwarder(router jobRouter, self string, peerKey []byte) func(http.Handler) http.Handler {
	gate := newPeerGate(peerKey, self, time.Now())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // replicas talk directly, whatever the proxy variables say
	tr.MaxIdleConnsPerHost = 64
	proxy := &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1, // every write of the owner reaches the client at once
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := pr.In.Context().Value(forwardTargetKey).(*forwardTarget)
			pr.SetURL(target.url)
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Request-ID", requestIDFrom(pr.In.Context()))
			if authFrom(pr.In.Context()) == authSession {
				// UI sessions live in this replica's memory; the owner
				// takes the token every replica shares.
				pr.Out.Header.Del("Cookie")
				pr.Out.Header.Del(uiKeyHeader)
				pr.Out.Header.Set("Authorization", "Bearer "+string(s.token))
			}
			if target.streamed {
				signPeerStreamed(pr.Out, peerKey, self, target.replica, pr.In.Method, pr.In.URL.RequestURI(), time.Now())
				return
			}
			signPeer(pr.Out.Header, peerKey, self, target.replica, pr.In.Method, pr.In.URL.RequestURI(), target.body, time.Now())
		},
		ModifyResponse: func(resp *http.Response) error {
			for _, h := range headersSetHere {
				resp.Header.Del(h)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			target := r.Context().Value(forwardTargetKey).(*forwardTarget)
			var op *net.OpError
			if r.Method == http.MethodGet || r.Method == http.MethodHead || (errors.As(err, &op) && op.Op == "dial") {
				s.writeError(w, r, &status.UnavailableError{Replica: target.replica, Err: fmt.Errorf("replica %q could not be reached: %w: %w", target.replica, target.unavailable, err)})
				return
			}
			// The request reached the replica, which may have run it.
			s.writeError(w, r, &status.UnavailableError{Replica: target.replica, MayHaveRun: true, Err: fmt.Errorf("%s: %w: %w", mayHaveRun(target, r), target.unavailable, err)})
		},
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if streamsBody(r) && (!hasPeerHeaders(r) || declaresBodySig(r)) {
				s.forwardUpload(w, r, gate, router, proxy, next)
				return
			}
			body, ok := s.hopBody(w, r)
			if !ok {
				return
			}
			if hasPeerHeaders(r) {
				s.serveForward(w, r, body, func(now time.Time) error {
					_, err := gate.admit(r, body, now)
					return err
				}, gate, router, next)
				return
			}
			target, err := s.route(r, body, router)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if target == nil {
				next.ServeHTTP(w, r)
				return
			}
			proxy.ServeHTTP(w, r.WithContext(withForwardTarget(r.Context(), target)))
		})
	}
}

// serveForward serves r, which says another replica sent it, when gate
// admits it and it belongs here; else it refuses it (see newForwarder).
func (s *Server) serveForward(w http.ResponseWriter, r *http.Request, body []byte, admit func(now time.Time) error, gate *peerGate, router jobRouter, next http.Handler) {
	now := time.Now()
	err := admit(now)
	if err == nil {
		target, rerr := s.route(r, body, router)
		if rerr != nil {
			s.writeError(w, r, rerr)
			return
		}
		if target != nil {
			err = fmt.Errorf("%w: what it names belongs to replica %q, and a forward is never forwarded again", errForwardRefused, target.replica)
		}
	}
	if err != nil {
		sender := r.Header.Get(forwardedHeader)
		if log, since := gate.shouldLog(sender, now); log {
			s.logger.Warn("refused a request forwarded by another replica (logged once a minute per sender)", "by", sender, "to", r.Header.Get(forwardedToHeader),
				"method", r.Method, "path", r.URL.Path, "reason", err, "refused_since_last_line", since, "request_id", requestIDFrom(r.Context()))
		}
		s.writeError(w, r, fmt.Errorf("replica %q refused a request forwarded by %q: %w", gate.self, sender, err))
		return
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), servedForPeerKey{}, true)))
}

// forwardUpload routes an upload to the file routes without holding its
// body: to the agent's home, sent as it arrives (bounded and timed as the
// routes read it, and proven by a trailer: see signPeerStreamed), or,
// forwarded here by another replica, admitted on its header signature
// with its body verified as it is read (verifyPeerStreamed).
func (s *Server) forwardUpload(w http.ResponseWriter, r *http.Request, gate *peerGate, router jobRouter, proxy http.Handler, next http.Handler) {
	if hasPeerHeaders(r) {
		s.serveForward(w, r, nil, func(now time.Time) error {
			p, err := verifyPeerStreamed(r, gate.key, now)
			if err != nil {
				return err
			}
			return gate.check(p, now)
		}, gate, router, next)
		return
	}
	target, err := s.route(r, nil, router)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if target == nil {
		next.ServeHTTP(w, r)
		return
	}
	body, err := s.uploadBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{body, r.Body}
	target.streamed = true
	proxy.ServeHTTP(w, r.WithContext(withForwardTarget(r.Context(), target)))
}

// hopBody reads r's body (see readBody) and puts it back, so that it can
// be signed and routed on. A body sent with a method that takes none is
// dropped, as limitBody would.
func (s *Server) hopBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if !hasBody(r) {
		return nil, true
	}
	if takesNoBody(r.Method) {
		w.Header().Set("Connection", "close")
		r.Body, r.ContentLength = http.NoBody, 0
		return nil, true
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return nil, false
	}
	r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	return body, true
}

// isToolCall reports whether p is a model tool call, /agents/{id}/tools/{name}.
func isToolCall(p string) bool {
	rest, ok := strings.CutPrefix(p, "/agents/")
	if !ok {
		return false
	}
	parts := strings.Split(rest, "/")
	return len(parts) == 3 && parts[0] != "" && parts[1] == "tools" && parts[2] != ""
}

// withCallID returns a tool call's body with its callId, setting one when
// it has none, so that an answer saying the call may have run can name it.
// A body that is not a JSON object is left for the home to refuse.
func (s *Server) withCallID(body []byte) ([]byte, string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return body, ""
	}
	var id string
	if raw, ok := m["callId"]; ok {
		if json.Unmarshal(raw, &id) != nil || id == "" {
			return body, ""
		}
		return body, id
	}
	id = s.ids.New("call_")
	m["callId"], _ = json.Marshal(id)
	out, err := json.Marshal(m)
	if err != nil {
		return body, ""
	}
	return out, id
}

// mayHaveRun says how to find out what a forwarded request that may have
// run did.
func mayHaveRun(t *forwardTarget, r *http.Request) string {
	msg := fmt.Sprintf("the request reached replica %q, which may have run it before the connection was lost", t.replica)
	switch {
	case t.callID != "":
		return msg + fmt.Sprintf("; its call id is %s: look for it in the agent's transcript, or retry with the same callId, which never runs it twice", t.callID)
	case r.Header.Get("Idempotency-Key") != "":
		return msg + "; retry with the same Idempotency-Key, which never runs it twice"
	}
	return msg
}
