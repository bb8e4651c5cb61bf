package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// modelServer is a scripted model on 127.0.0.1 that speaks the OpenAI
// Responses API (POST …/responses), the Anthropic Messages API (POST
// …/messages) and the Gemini API (POST …/models/{model}:generateContent
// and :streamGenerateContent), each with and without streaming. To a request that offers a
// bash tool (named bash, or ending in "bash" as MCP clients prefix it) and
// carries no result of its call yet, it answers with one call of that tool
// running command (first loading it with ToolSearch where Claude Code
// defers MCP tools); once the result comes back it records the result's
// text and answers with final text. Any other request (a client's title or
// quota probe) gets plain text. MODELSERVER_DUMP=dir writes each request
// body there, to see what a client sends.
type modelServer struct {
	URL     string
	command string
	callID  string

	mu       sync.Mutex
	results  []string // the texts of our call's results, as received
	requests []string // method and path of every request
	tools    [][]string
}

func startModelServer(t testing.TB, command string) *modelServer {
	t.Helper()
	ms := &modelServer{command: command, callID: "call_dshd_1"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ms, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	ms.URL = "http://" + ln.Addr().String()
	return ms
}

// Results returns the texts of the tool results received so far.
func (ms *modelServer) Results() []string {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return append([]string(nil), ms.results...)
}

// Log describes what the server saw, for failure messages.
func (ms *modelServer) Log() string {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return fmt.Sprintf("requests %q, tools offered %q, results %q", ms.requests, ms.tools, ms.results)
}

func (ms *modelServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ms.mu.Lock()
	ms.requests = append(ms.requests, r.Method+" "+r.URL.Path)
	ms.mu.Unlock()
	if d := os.Getenv("MODELSERVER_DUMP"); d != "" {
		_ = os.WriteFile(fmt.Sprintf("%s/%d.json", d, time.Now().UnixNano()), body, 0o644)
	}
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses"):
		ms.responses(w, body)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages/count_tokens"):
		writeJSON(w, map[string]any{"input_tokens": 100})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages"):
		ms.messages(w, body)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":countTokens"):
		writeJSON(w, map[string]any{"totalTokens": 100})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":generateContent"):
		ms.gemini(w, body, r.URL.Path, false)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
		ms.gemini(w, body, r.URL.Path, true)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"type":"not_found_error","message":"no such route"}}`)
	}
}

// pickTool returns the bash tool among names, if offered.
func (ms *modelServer) pickTool(names []string) string {
	ms.mu.Lock()
	ms.tools = append(ms.tools, names)
	ms.mu.Unlock()
	for _, n := range names {
		if n == "bash" || strings.HasSuffix(n, "__bash") || strings.HasSuffix(n, ".bash") ||
			(strings.HasPrefix(n, "mcp_") && strings.HasSuffix(n, "_bash")) {
			return n
		}
	}
	return ""
}

func (ms *modelServer) record(text string) {
	ms.mu.Lock()
	ms.results = append(ms.results, text)
	ms.mu.Unlock()
}

// contentText flattens a tool result's content: a string, or a list of
// blocks with text.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		b.WriteString(bl.Text)
	}
	return b.String()
}

// --- OpenAI Responses API ---

func (ms *modelServer) responses(w http.ResponseWriter, body []byte) {
	var req struct {
		Model  string          `json:"model"`
		Input  json.RawMessage `json:"input"`
		Stream bool            `json:"stream"`
		Tools  []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var items []struct {
		Type   string          `json:"type"`
		CallID string          `json:"call_id"`
		Output json.RawMessage `json:"output"`
	}
	_ = json.Unmarshal(req.Input, &items) // a string input has none
	answered := false
	for _, it := range items {
		if it.Type == "function_call_output" && it.CallID == ms.callID {
			ms.record(contentText(it.Output))
			answered = true
		}
	}
	// A namespace tool (Codex groups an MCP server's tools in one) is
	// called by its own name with the namespace beside it.
	var names []string
	namespace := map[string]string{}
	for _, t := range req.Tools {
		if t.Type == "namespace" {
			for _, sub := range t.Tools {
				names = append(names, t.Name+"__"+sub.Name)
				namespace[t.Name+"__"+sub.Name] = t.Name
			}
			continue
		}
		names = append(names, t.Name)
	}
	tool := ms.pickTool(names)
	var item map[string]any
	if !answered && tool != "" {
		args, _ := json.Marshal(map[string]any{"command": ms.command})
		item = map[string]any{"type": "function_call", "id": "fc_1", "call_id": ms.callID, "name": tool,
			"arguments": string(args), "status": "completed"}
		if ns := namespace[tool]; ns != "" {
			item["namespace"], item["name"] = ns, strings.TrimPrefix(tool, ns+"__")
		}
	} else {
		item = map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": "done", "annotations": []any{}}}}
	}
	resp := func(status string, output []any) map[string]any {
		return map[string]any{"id": "resp_1", "object": "response", "created_at": time.Now().Unix(), "status": status,
			"model": req.Model, "output": output, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{},
			"usage": map[string]any{"input_tokens": 10, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": 5, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 15}}
	}
	if !req.Stream {
		writeJSON(w, resp("completed", []any{item}))
		return
	}
	sse := newSSE(w)
	sse.event("response.created", map[string]any{"type": "response.created", "response": resp("in_progress", []any{})})
	sse.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	if item["type"] == "message" {
		sse.event("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_1",
			"output_index": 0, "content_index": 0, "delta": "done"})
	}
	sse.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	sse.event("response.completed", map[string]any{"type": "response.completed", "response": resp("completed", []any{item})})
}

// --- Anthropic Messages API ---

func (ms *modelServer) messages(w http.ResponseWriter, body []byte) {
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	answered := false
	for _, m := range req.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(m.Content, &blocks) // a string content has none
		for _, b := range blocks {
			if b.Type == "tool_result" && b.ToolUseID == ms.callID {
				ms.record(contentText(b.Content))
				answered = true
			}
		}
	}
	var names []string
	for _, t := range req.Tools {
		names = append(names, t.Name)
	}
	tool := ms.pickTool(names)
	block := map[string]any{"type": "text", "text": "done"}
	stop := "end_turn"
	if !answered && tool != "" {
		block = map[string]any{"type": "tool_use", "id": ms.callID, "name": tool, "input": map[string]any{"command": ms.command}}
		stop = "tool_use"
	} else if deferred := deferredBashRE.Find(body); !answered && tool == "" && deferred != nil &&
		slices.Contains(names, "ToolSearch") && !strings.Contains(string(body), `"tool_use_id":"call_search_1"`) {
		// Claude Code defers MCP tools: the model names them in a
		// ToolSearch first, which loads them into the next request's tools.
		block = map[string]any{"type": "tool_use", "id": "call_search_1", "name": "ToolSearch",
			"input": map[string]any{"query": "select:" + string(deferred), "max_results": 1}}
		stop = "tool_use"
	}
	usage := map[string]any{"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	msg := map[string]any{"id": "msg_1", "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	if !req.Stream {
		writeJSON(w, msg)
		return
	}
	sse := newSSE(w)
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	sse.event("message_start", map[string]any{"type": "message_start", "message": start})
	if block["type"] == "tool_use" {
		args, _ := json.Marshal(block["input"])
		sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}})
		sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(args)}})
	} else {
		sse.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		sse.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": "done"}})
	}
	sse.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 5}})
	sse.event("message_stop", map[string]any{"type": "message_stop"})
}

// --- Gemini API ---

func (ms *modelServer) gemini(w http.ResponseWriter, body []byte, path string, stream bool) {
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				FunctionResponse *struct {
					Name     string          `json:"name"`
					Response json.RawMessage `json:"response"`
				} `json:"functionResponse"`
			} `json:"parts"`
		} `json:"contents"`
		Tools []struct {
			FunctionDeclarations []struct {
				Name string `json:"name"`
			} `json:"functionDeclarations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var names []string
	for _, t := range req.Tools {
		for _, d := range t.FunctionDeclarations {
			names = append(names, d.Name)
		}
	}
	tool := ms.pickTool(names)
	answered := false
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			// Gemini has no call ids: a result of the bash tool is ours.
			if fr := p.FunctionResponse; fr != nil && fr.Name == tool {
				ms.record(string(fr.Response))
				answered = true
			}
		}
	}
	part := map[string]any{"text": "done"}
	if !answered && tool != "" {
		part = map[string]any{"functionCall": map[string]any{"name": tool, "args": map[string]any{"command": ms.command}}}
	}
	model := strings.TrimSuffix(path[strings.LastIndex(path, "/")+1:], ":generateContent")
	resp := map[string]any{
		"candidates": []any{map[string]any{"index": 0, "finishReason": "STOP",
			"content": map[string]any{"role": "model", "parts": []any{part}}}},
		"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
		"modelVersion":  strings.TrimSuffix(model, ":streamGenerateContent"),
	}
	if !stream {
		writeJSON(w, resp)
		return
	}
	sse := newSSE(w)
	b, _ := json.Marshal(resp)
	fmt.Fprintf(sse.w, "data: %s\r\n\r\n", b)
	if sse.f != nil {
		sse.f.Flush()
	}
}

// deferredBashRE finds an MCP client's deferred bash tool named in a request.
var deferredBashRE = regexp.MustCompile(`mcp__[A-Za-z0-9_-]+__bash\b`)

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

type sseWriter struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sseWriter{w: w, f: f}
}

func (s *sseWriter) event(name string, data any) {
	b, _ := json.Marshal(data)
	fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, b)
	if s.f != nil {
		s.f.Flush()
	}
}
