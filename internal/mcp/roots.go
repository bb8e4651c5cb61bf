package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dshd/dshd/internal/agents"
)

// Roots. A client may offer roots (Claude Code offers its project
// directory). When the harness permits some (Options.AllowedRoots), a new
// session whose client offers roots gets its agent at its first tool call,
// not at initialize: roots can only be asked for once the session is
// initialized. The agent's cwd is the first root the client lists that
// lies within an allowed root, else the server's default directory; the
// session's instructions say so.

// rootsTimeout bounds the roots/list request to the client.
const rootsTimeout = 10 * time.Second

// sessionAgent is the agent a session runs as: known at initialize, or
// made at the first call (make).
type sessionAgent struct {
	mu   sync.Mutex
	id   string
	make func(ctx context.Context, ss *sdk.ServerSession) (string, error)
}

// get returns the agent's id, making the agent first if need be.
func (a *sessionAgent) get(ctx context.Context, ss *sdk.ServerSession) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.id == "" {
		id, err := a.make(ctx, ss)
		if err != nil {
			return "", err
		}
		a.id = id
	}
	return a.id, nil
}

// allowedRoots cleans the permitted roots and resolves their symlinks, so
// that a client root is compared with what it really names.
func allowedRoots(roots []string) []string {
	var out []string
	for _, r := range roots {
		if !filepath.IsAbs(r) {
			continue
		}
		if real, err := filepath.EvalSymlinks(r); err == nil {
			r = real
		}
		out = append(out, filepath.Clean(r))
	}
	return out
}

// offersRoots reports whether an initialize request's client declares the
// roots capability.
func offersRoots(msg *message) bool {
	var p struct {
		Capabilities struct {
			Roots *struct{} `json:"roots"`
		} `json:"capabilities"`
	}
	return json.Unmarshal(msg.fields["params"], &p) == nil && p.Capabilities.Roots != nil
}

// rootsApply reports whether the session r initializes gets its agent from
// the client's roots: no agent named, roots permitted and offered.
func (h *Handler) rootsApply(r *http.Request, msg *message) bool {
	return len(h.allowedRoots) > 0 && r.Header.Get(AgentHeader) == "" && r.URL.Query().Get(AgentQuery) == "" && offersRoots(msg)
}

// rootsServer is the server of a session whose agent comes from roots.
func (h *Handler) rootsServer() *sdk.Server {
	agent := &sessionAgent{make: h.makeInRoot}
	instructions := fmt.Sprintf("Your commands run in the first directory this client offers as a root that lies within %s; "+
		"if it offers none there, in the server's default directory. $PWD in a command shows which.", strings.Join(h.allowedRoots, ", "))
	return h.newServer(agent, h.pipeline.AgentPolicy(agents.Agent{}), instructions)
}

// makeInRoot makes a session's agent in the client's first permitted root.
func (h *Handler) makeInRoot(ctx context.Context, ss *sdk.ServerSession) (string, error) {
	cwd := ""
	rctx, cancel := context.WithTimeout(ctx, rootsTimeout)
	res, err := ss.ListRoots(rctx, nil)
	cancel()
	if err != nil {
		h.log.Info("MCP client roots unavailable: the agent runs in the default directory", "err", err)
	} else {
		cwd = h.pickRoot(res.Roots)
	}
	sess, err := h.pipeline.CreateAgent(ctx, cwd, agents.Bounds{})
	if err != nil {
		return "", fmt.Errorf("create an agent for the MCP session: %w", err)
	}
	h.log.Info("MCP session's agent made", "agent_id", sess.ID, "cwd", sess.Cwd, "from_root", cwd != "")
	return sess.ID, nil
}

// pickRoot is the first of roots (file URIs) naming an existing directory
// within an allowed root, symlinks resolved; "" if none.
func (h *Handler) pickRoot(roots []*sdk.Root) string {
	for _, r := range roots {
		u, err := url.Parse(r.URI)
		if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
			continue
		}
		dir, err := filepath.EvalSymlinks(filepath.Clean(u.Path))
		if err != nil {
			continue
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		for _, allowed := range h.allowedRoots {
			if rel, err := filepath.Rel(allowed, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return dir
			}
		}
		h.log.Debug("MCP client root outside the allowed roots", "root", r.URI)
	}
	return ""
}
