package mcp

import (
	"encoding/json"

	"github.com/dshd/dshd/internal/sandbox"
)

// CodexSandboxMeta is the key of the sandbox state Codex sends in the
// _meta of each tools/call to a server that declares it among its
// experimental capabilities (Codex: MCP_SANDBOX_STATE_META_CAPABILITY).
// dshd declares it, reads the state, and runs the call's command under the
// tighter, axis by axis, of the agent's policy and the declared one: a
// client can tighten a call, never loosen it.
const CodexSandboxMeta = "codex/sandbox-state-meta"

// codexSandboxState is the part of Codex's SandboxState dshd reads: the
// legacy sandboxPolicy and the newer permissionProfile (either may be
// absent; both given, the tighter counts).
type codexSandboxState struct {
	SandboxPolicy *struct {
		Type string `json:"type"`
		// network_access: a boolean in read-only and workspace-write,
		// "enabled" or "restricted" in external-sandbox.
		NetworkAccess      json.RawMessage `json:"network_access"`
		NetworkAccessCamel json.RawMessage `json:"networkAccess"`
	} `json:"sandboxPolicy"`
	PermissionProfile *struct {
		Type       string `json:"type"` // disabled, managed, external
		Network    string `json:"network"`
		FileSystem *struct {
			Type    string `json:"type"` // unrestricted, restricted
			Entries []struct {
				Access string `json:"access"` // read, write, none
			} `json:"entries"`
		} `json:"file_system"`
	} `json:"permissionProfile"`
}

// declaredPolicy is the policy a client declares in a call's _meta, empty
// fields where it declares nothing on that axis; ok is false when it
// declares none dshd understands.
func declaredPolicy(meta map[string]any) (p sandbox.Policy, ok bool) {
	v, found := meta[CodexSandboxMeta]
	if !found {
		return p, false
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return p, false
	}
	var st codexSandboxState
	if json.Unmarshal(raw, &st) != nil {
		return p, false
	}
	if sp := st.SandboxPolicy; sp != nil {
		net := sp.NetworkAccess
		if net == nil {
			net = sp.NetworkAccessCamel
		}
		switch sp.Type {
		case "read-only", "readOnly":
			p = tighter(p, sandbox.Policy{FS: sandbox.ReadOnly, Network: networkOf(net)})
			ok = true
		case "workspace-write", "workspaceWrite":
			p = tighter(p, sandbox.Policy{FS: sandbox.WorkspaceWrite, Network: networkOf(net)})
			ok = true
		case "external-sandbox", "externalSandbox":
			p = tighter(p, sandbox.Policy{Network: networkOf(net)})
			ok = true
		case "danger-full-access", "dangerFullAccess":
			ok = true
		}
	}
	if pp := st.PermissionProfile; pp != nil {
		switch pp.Type {
		case "disabled":
			ok = true
		case "managed", "external":
			q := sandbox.Policy{Network: sandbox.NetworkOn}
			if pp.Network != "enabled" {
				q.Network = sandbox.NetworkOff
			}
			if fs := pp.FileSystem; pp.Type == "managed" && fs != nil && fs.Type == "restricted" {
				q.FS = sandbox.ReadOnly
				for _, e := range fs.Entries {
					if e.Access == "write" {
						q.FS = sandbox.WorkspaceWrite
					}
				}
			}
			p = tighter(p, q)
			ok = true
		}
	}
	return p, ok
}

// networkOf reads a network_access value: true or "enabled" is on; false,
// absent or anything else is off, as Codex's own sandbox defaults.
func networkOf(raw json.RawMessage) sandbox.Network {
	var b bool
	if json.Unmarshal(raw, &b) == nil && b {
		return sandbox.NetworkOn
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && s == "enabled" {
		return sandbox.NetworkOn
	}
	return sandbox.NetworkOff
}

// tighter is, on each axis, the tighter of a and b; an empty field is no
// constraint.
func tighter(a, b sandbox.Policy) sandbox.Policy {
	out := a
	if b.FS != "" && (a.FS == "" || (sandbox.Policy{FS: b.FS, Network: sandbox.NetworkOn}).Within(sandbox.Policy{FS: a.FS, Network: sandbox.NetworkOn})) {
		out.FS = b.FS
	}
	if b.Network != "" && (a.Network == "" || (sandbox.Policy{FS: sandbox.Unrestricted, Network: b.Network}).Within(sandbox.Policy{FS: sandbox.Unrestricted, Network: a.Network})) {
		// An allowlist goes with its network (a declared off replaces it).
		out.Network, out.Allow = b.Network, b.Allow
	}
	return out
}
