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

// appendJob appends j as encoding/json encodes it. It reports false, having
// appended part of it, when it leaves j to encoding/json: a time that
// encoding/json refuses.
func appendJob(b []byte, j *api.Job) ([]byte, bool) {
	ok := true
	str := func(s string) { b = appendString(b, s) }
	when := func(t time.Time) {
		if y := t.Year(); y < 0 || y > 9999 {
			ok = false // encoding/json's error, left to it
			return
		}
		b = append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
	}
	i64 := func(p *int64) {
		if p == nil {
			b = append(b, "null"...)
			return
		}
		b = strconv.AppendInt(b, *p, 10)
	}
	// marshal appends what appendJob leaves to encoding/json: the parts
	// of a job that few answers have.
	marshal := func(v any) {
		m, err := json.Marshal(v)
		if err != nil {
			ok = false
			return
		}
		b = append(b, m...)
	}

	b = append(b, `{"agentId":`...)
	if j.AgentId == nil {
		b = append(b, "null"...)
	} else {
		str(*j.AgentId)
	}
	b = strconv.AppendBool(append(b, `,"background":`...), j.Background)
	b = append(b, `,"command":`...)
	str(j.Command)
	b = append(b, `,"createdAt":`...)
	when(j.CreatedAt)
	b = append(b, `,"cwd":`...)
	str(j.Cwd)
	b = append(b, `,"durationMs":`...)
	i64(j.DurationMs)
	b = append(b, `,"endedAt":`...)
	if j.EndedAt == nil {
		b = append(b, "null"...)
	} else {
		when(*j.EndedAt)
	}
	b = append(b, `,"exitCode":`...)
	if j.ExitCode == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*j.ExitCode), 10)
	}
	b = append(b, `,"id":`...)
	str(j.Id)
	if j.Input != nil {
		b = append(b, `,"input":`...)
		marshal(j.Input)
	}
	if j.KilledBy != nil {
		b = append(b, `,"killedBy":`...)
		marshal(j.KilledBy)
	}
	if j.Limits != nil {
		b = append(b, `,"limits":`...)
		marshal(j.Limits)
	}
	b = append(b, `,"managedEnv":`...)
	if j.ManagedEnv == nil {
		b = append(b, "null"...)
	} else {
		keys := make([]string, 0, len(j.ManagedEnv))
		for k := range j.ManagedEnv {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			str(k)
			b = append(b, ':')
			str(j.ManagedEnv[k])
		}
		b = append(b, '}')
	}
	if j.Network != nil {
		b = append(b, `,"network":`...)
		marshal(j.Network)
	}
	b = strconv.AppendInt(append(b, `,"pid":`...), int64(j.Pid), 10)
	if j.Remaining != nil {
		b = append(b, `,"remaining":`...)
		marshal(j.Remaining)
	}
	if s := j.Sandbox; s != nil {
		b = append(b, `,"sandbox":`...)
		if s.Allow != nil {
			marshal(s)
		} else {
			b = append(b, `{"network":`...)
			str(string(s.Network))
			b = append(b, `,"policy":`...)
			str(string(s.Policy))
			b = append(b, '}')
		}
	}
	b = append(b, `,"signal":`...)
	if j.Signal == nil {
		b = append(b, "null"...)
	} else {
		str(*j.Signal)
	}
	b = append(b, `,"startedAt":`...)
	when(j.StartedAt)
	b = append(b, `,"state":`...)
	str(string(j.State))
	b = appendOutput(append(b, `,"stderr":`...), &j.Stderr)
	b = appendOutput(append(b, `,"stdout":`...), &j.Stdout)
	if j.Terminal != nil {
		b = append(b, `,"terminal":`...)
		marshal(j.Terminal)
	}
	b = append(b, `,"timeoutMs":`...)
	i64(j.TimeoutMs)
	if u := j.Usage; u != nil {
		b = strconv.AppendInt(append(b, `,"usage":{"cpuMs":`...), u.CpuMs, 10)
		if u.PeakMemoryBytes != nil {
			b = strconv.AppendInt(append(b, `,"peakMemoryBytes":`...), *u.PeakMemoryBytes, 10)
		}
		if u.PeakPids != nil {
			b = strconv.AppendInt(append(b, `,"peakPids":`...), *u.PeakPids, 10)
		}
		b = append(b, '}')
	}
	return append(b, '}'), ok
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
