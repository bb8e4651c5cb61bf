package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/dshd/dshd/internal/http/api"
)

// jobAnswer is a job answered with 200: the body of a foreground POST /exec
// and of GET /jobs/{id}, the two answers a harness's loop waits on. It is
// encoded by appendJob, byte for byte what the generated response's
// encoding/json gives (TestJobJSONMatchesEncodingJSON), without walking the
// type by reflection: on a request that finds its caches cold, as one does
// after the command it ran, that walk was most of the time from the job's
// end to its answer.
type jobAnswer api.Job

func (a jobAnswer) VisitExecResponse(w http.ResponseWriter) error   { return a.write(w) }
func (a jobAnswer) VisitGetJobResponse(w http.ResponseWriter) error { return a.write(w) }

func (a jobAnswer) write(w http.ResponseWriter) error {
	j := api.Job(a)
	b, ok := appendJob(make([]byte, 0, 1024), &j)
	if !ok {
		var err error
		if b, err = json.Marshal(j); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(append(b, '\n')) // as json.Encoder ends a value
	return err
}

// appendJob appends j as encoding/json encodes it: its fields in the order
// of their names, the optional ones only when set. It reports false, having
// appended part of it, when it leaves j to encoding/json: a time that
// encoding/json refuses.
func appendJob(b []byte, j *api.Job) ([]byte, bool) {
	e := jobEncoder{b: b, ok: true}
	e.key(`{"agentId":`)
	e.nullStr(j.AgentId)
	e.b = strconv.AppendBool(append(e.b, `,"background":`...), j.Background)
	e.key(`,"command":`)
	e.str(j.Command)
	e.key(`,"createdAt":`)
	e.when(j.CreatedAt)
	e.key(`,"cwd":`)
	e.str(j.Cwd)
	e.key(`,"durationMs":`)
	e.i64(j.DurationMs)
	e.key(`,"endedAt":`)
	if j.EndedAt == nil {
		e.key("null")
	} else {
		e.when(*j.EndedAt)
	}
	e.key(`,"exitCode":`)
	if j.ExitCode == nil {
		e.key("null")
	} else {
		e.b = strconv.AppendInt(e.b, int64(*j.ExitCode), 10)
	}
	e.key(`,"id":`)
	e.str(j.Id)
	e.optional(`,"input":`, j.Input != nil, j.Input)
	e.optional(`,"killedBy":`, j.KilledBy != nil, j.KilledBy)
	e.optional(`,"limits":`, j.Limits != nil, j.Limits)
	e.key(`,"managedEnv":`)
	e.managedEnv(j.ManagedEnv)
	e.optional(`,"network":`, j.Network != nil, j.Network)
	e.b = strconv.AppendInt(append(e.b, `,"pid":`...), int64(j.Pid), 10)
	e.optional(`,"remaining":`, j.Remaining != nil, j.Remaining)
	if j.Sandbox != nil {
		e.key(`,"sandbox":`)
		e.sandbox(j.Sandbox)
	}
	e.key(`,"signal":`)
	e.nullStr(j.Signal)
	e.key(`,"startedAt":`)
	e.when(j.StartedAt)
	e.key(`,"state":`)
	e.str(string(j.State))
	e.b = appendOutput(append(e.b, `,"stderr":`...), &j.Stderr)
	e.b = appendOutput(append(e.b, `,"stdout":`...), &j.Stdout)
	e.optional(`,"terminal":`, j.Terminal != nil, j.Terminal)
	e.key(`,"timeoutMs":`)
	e.i64(j.TimeoutMs)
	if j.Usage != nil {
		e.usage(j.Usage)
	}
	return append(e.b, '}'), e.ok
}

// jobEncoder is appendJob's buffer, and whether it can do without
// encoding/json so far.
type jobEncoder struct {
	b  []byte
	ok bool
}

// key appends k as it is: a field's key with its punctuation, or a literal.
func (e *jobEncoder) key(k string) { e.b = append(e.b, k...) }

func (e *jobEncoder) str(s string) { e.b = appendString(e.b, s) }

// nullStr appends *p, or null.
func (e *jobEncoder) nullStr(p *string) {
	if p == nil {
		e.key("null")
		return
	}
	e.str(*p)
}

// when appends t as encoding/json does, or leaves it to encoding/json (ok
// false) for a year it refuses.
func (e *jobEncoder) when(t time.Time) {
	if y := t.Year(); y < 0 || y > 9999 {
		e.ok = false // encoding/json's error, left to it
		return
	}
	e.b = append(t.AppendFormat(append(e.b, '"'), time.RFC3339Nano), '"')
}

// i64 appends *p, or null.
func (e *jobEncoder) i64(p *int64) {
	if p == nil {
		e.key("null")
		return
	}
	e.b = strconv.AppendInt(e.b, *p, 10)
}

// marshal appends what appendJob leaves to encoding/json: the parts of a
// job that few answers have.
func (e *jobEncoder) marshal(v any) {
	m, err := json.Marshal(v)
	if err != nil {
		e.ok = false
		return
	}
	e.b = append(e.b, m...)
}

// optional appends key and v (by encoding/json) when set.
func (e *jobEncoder) optional(key string, set bool, v any) {
	if set {
		e.key(key)
		e.marshal(v)
	}
}

// managedEnv appends the managed snapshot, its keys sorted, or null.
func (e *jobEncoder) managedEnv(m map[string]string) {
	if m == nil {
		e.key("null")
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	e.b = append(e.b, '{')
	for i, k := range keys {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.str(k)
		e.b = append(e.b, ':')
		e.str(m[k])
	}
	e.b = append(e.b, '}')
}

// sandbox appends the job's policy: by hand without an allowlist, else by
// encoding/json.
func (e *jobEncoder) sandbox(s *api.SandboxPolicy) {
	if s.Allow != nil {
		e.marshal(s)
		return
	}
	e.key(`{"network":`)
	e.str(string(s.Network))
	e.key(`,"policy":`)
	e.str(string(s.Policy))
	e.b = append(e.b, '}')
}

// usage appends the usage field.
func (e *jobEncoder) usage(u *api.JobUsage) {
	e.b = strconv.AppendInt(append(e.b, `,"usage":{"cpuMs":`...), u.CpuMs, 10)
	if u.PeakMemoryBytes != nil {
		e.b = strconv.AppendInt(append(e.b, `,"peakMemoryBytes":`...), *u.PeakMemoryBytes, 10)
	}
	if u.PeakPids != nil {
		e.b = strconv.AppendInt(append(e.b, `,"peakPids":`...), *u.PeakPids, 10)
	}
	e.b = append(e.b, '}')
}

func appendOutput(b []byte, o *api.Output) []byte {
	b = append(b, '{')
	if o.DroppedBytes != nil {
		b = strconv.AppendInt(append(b, `"droppedBytes":`...), *o.DroppedBytes, 10)
		b = append(b, ',')
	}
	if o.DroppedReason != nil {
		b = appendString(append(b, `"droppedReason":`...), string(*o.DroppedReason))
		b = append(b, ',')
	}
	b = appendString(append(b, `"text":`...), o.Text)
	b = strconv.AppendInt(append(b, `,"totalBytes":`...), o.TotalBytes, 10)
	b = strconv.AppendBool(append(b, `,"truncated":`...), o.Truncated)
	return append(b, '}')
}

// appendString appends s quoted as encoding/json quotes it. Text that needs
// no escape, as ids, paths and most commands, is copied; the rest (escapes,
// the HTML characters encoding/json escapes, text that is not UTF-8) is
// encoding/json's own work.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			m, _ := json.Marshal(s) // a string always encodes
			return append(b, m...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}
