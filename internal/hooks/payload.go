package hooks

import (
	"bytes"
	"encoding/json"
)

// Payload constants. dshd does not know which model the harness uses, so
// Codex's model is "" (a valid, honestly empty string) rather than a made-up
// name. permission_mode (both dialects) is "default": dshd never prompts
// anyone, but hook scripts should apply their normal policy rather than treat
// calls as pre-approved ("bypassPermissions") or as plan-only.
const (
	codexModel     = ""
	permissionMode = "default"
)

// claudePayload is Claude Code's hook input. Field order follows Claude
// Code's; tool fields are omitted for SessionStart and source for tool
// events.
type claudePayload struct {
	SessionID      string    `json:"session_id"`
	TranscriptPath string    `json:"transcript_path"` // always "": dshd exposes no transcript location
	Cwd            string    `json:"cwd"`
	PermissionMode string    `json:"permission_mode"`
	HookEventName  EventName `json:"hook_event_name"`
	Source         string    `json:"source,omitempty"`
	ToolName       *string   `json:"tool_name,omitempty"`
	ToolInput      any       `json:"tool_input,omitempty"`
	ToolResponse   any       `json:"tool_response,omitempty"`
	ToolUseID      *string   `json:"tool_use_id,omitempty"`
}

// codexPayload is Codex's hook input. Field order follows Codex's.
type codexPayload struct {
	SessionID      string    `json:"session_id"`
	TurnID         *string   `json:"turn_id,omitempty"`
	TranscriptPath *string   `json:"transcript_path"` // always null
	Cwd            string    `json:"cwd"`
	HookEventName  EventName `json:"hook_event_name"`
	Model          string    `json:"model"`
	PermissionMode string    `json:"permission_mode"`
	Source         string    `json:"source,omitempty"`
	ToolName       *string   `json:"tool_name,omitempty"`
	ToolInput      any       `json:"tool_input,omitempty"`
	ToolResponse   any       `json:"tool_response,omitempty"`
	ToolUseID      *string   `json:"tool_use_id,omitempty"`
}

// payload renders the stdin of a dialect's hooks for in. newTurnID supplies
// Codex's turn_id when in has neither TurnID nor ToolUseID. Claude Code's
// payload ends with a newline; Codex's does not. HTML characters are not
// escaped, so hooks that grep the raw text see "&&" rather than "\u0026\u0026".
func payload(d Dialect, in Input, newTurnID func() string) ([]byte, error) {
	var (
		toolName, toolUseID *string
		toolInput, toolResp any
		source              string
	)
	empty := struct{}{}
	switch in.Event {
	case SessionStart:
		source = in.Source
		if source == "" {
			source = "startup"
		}
	case PreToolUse, PostToolUse:
		toolName, toolUseID = &in.ToolName, &in.ToolUseID
		toolInput = in.ToolInput
		if toolInput == nil {
			toolInput = empty
		}
		if in.Event == PostToolUse {
			toolResp = in.ToolResponse
			if toolResp == nil {
				toolResp = empty
			}
		}
	}
	var v any
	switch d {
	case DialectCodex:
		p := codexPayload{SessionID: in.SessionID, Cwd: in.Cwd, HookEventName: in.Event,
			Model: codexModel, PermissionMode: permissionMode, Source: source,
			ToolName: toolName, ToolInput: toolInput, ToolResponse: toolResp, ToolUseID: toolUseID}
		if in.Event != SessionStart {
			turn := in.TurnID
			if turn == "" {
				turn = in.ToolUseID
			}
			if turn == "" {
				turn = newTurnID()
			}
			p.TurnID = &turn
		}
		v = p
	default:
		v = claudePayload{SessionID: in.SessionID, Cwd: in.Cwd, PermissionMode: permissionMode, HookEventName: in.Event,
			Source: source, ToolName: toolName, ToolInput: toolInput, ToolResponse: toolResp,
			ToolUseID: toolUseID}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode appends '\n'
		return nil, err
	}
	out := buf.Bytes()
	if d == DialectCodex {
		out = bytes.TrimSuffix(out, []byte{'\n'})
	}
	return out, nil
}
