package agents

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// A home keeps, in a directory of its own (Options.KeptResults), the
// tool/result of a call that ran but could not be written to a shared
// store that was unreachable (cluster mode), until it is written. When the
// home restarts first, the transcript gets that result instead of the
// interrupted one.

// KeptResult is one kept result: the data of its tool/result event.
type KeptResult struct {
	Agent  string          `json:"agent"`
	CallID string          `json:"callId"`
	Data   json.RawMessage `json:"data"`
}

// KeptResultPath is where the result of agent's call id is kept in dir.
func KeptResultPath(dir, agent, callID string) string {
	sum := sha256.Sum256([]byte(agent + "\x00" + callID))
	return filepath.Join(dir, hex.EncodeToString(sum[:16])+".json")
}

// KeepResult writes k to dir, synced, replacing any earlier copy.
func KeepResult(dir string, k KeptResult) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(k)
	if err != nil {
		return err
	}
	p := KeptResultPath(dir, k.Agent, k.CallID)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, p)
}

// DropKeptResult removes the kept result of agent's call id, if any.
func DropKeptResult(dir, agent, callID string) error {
	if dir == "" {
		return nil
	}
	err := os.Remove(KeptResultPath(dir, agent, callID))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// keptResult reads the kept result of agent's call id.
func (s *Store) keptResult(agent, callID string) (json.RawMessage, bool) {
	if s.keptDir == "" {
		return nil, false
	}
	b, err := os.ReadFile(KeptResultPath(s.keptDir, agent, callID))
	if err != nil {
		return nil, false
	}
	var k KeptResult
	if err := json.Unmarshal(b, &k); err != nil || k.Agent != agent || k.CallID != callID || len(k.Data) == 0 {
		s.log.Warn("ignoring a kept tool result that does not read", "agent_id", agent, "call_id", callID, "err", fmt.Sprint(err))
		return nil, false
	}
	return k.Data, true
}
