package tests

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// sseClient decodes a text/event-stream the way the SSE standard says a
// client must (fields id, event, data, retry; comments; dispatch on a blank
// line), and decodes dshd's output events into the bytes they carry. It is
// written for speed, as a careful Go client would be: benchmarks measure
// delivery through it.
type sseClient struct {
	r    *bufio.Reader
	line []byte // a line longer than the reader's buffer, reassembled
	// Fields of the event being read.
	id, name string
	data     []byte
	hasData  bool
	// LastID is the last event id seen, as a reconnecting client keeps it.
	LastID string
	// Retry is the last reconnection delay the server asked for (ms).
	Retry int
}

func newSSEClient(r io.Reader) *sseClient {
	return &sseClient{r: bufio.NewReaderSize(r, 1<<20)}
}

// wireEvent is one dispatched event. Data is only valid until the next call.
type wireEvent struct {
	ID, Name string
	Data     []byte
}

// Next returns the next event, or io.EOF when the stream ends between events.
func (c *sseClient) Next() (wireEvent, error) {
	for {
		line, err := c.readLine()
		if err != nil {
			if err == io.EOF && len(line) == 0 {
				return wireEvent{}, io.EOF
			}
			if err != io.EOF {
				return wireEvent{}, err
			}
		}
		if len(line) == 0 {
			if err == io.EOF {
				return wireEvent{}, io.ErrUnexpectedEOF
			}
			// Dispatch. An event without data is not dispatched.
			if !c.hasData {
				c.name = ""
				continue
			}
			ev := wireEvent{ID: c.LastID, Name: c.name, Data: c.data}
			if ev.Name == "" {
				ev.Name = "message"
			}
			c.name, c.data, c.hasData = "", c.data[:0], false
			return ev, nil
		}
		if line[0] == ':' {
			continue // comment (keep-alive)
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if c.hasData {
				c.data = append(c.data, '\n')
			}
			c.data = append(c.data, value...)
			c.hasData = true
		case "event":
			c.name = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				c.LastID = string(value)
			}
		case "retry":
			if n, err := strconv.Atoi(string(value)); err == nil {
				c.Retry = n
			}
		}
		if err == io.EOF {
			return wireEvent{}, io.ErrUnexpectedEOF
		}
	}
}

// readLine returns one line without its terminator (LF, CRLF or CR are all
// terminators in SSE; dshd sends LF).
func (c *sseClient) readLine() ([]byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		c.line = append(c.line[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = c.r.ReadSlice('\n')
			c.line = append(c.line, line...)
		}
		line = c.line
	}
	if err != nil && err != io.EOF {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	return line, err
}

// decodeChunk appends the bytes an output event carries to dst: its data is
// a JSON string (UTF-8 output) or an object {"base64": "…"} (any other
// bytes).
func decodeChunk(dst, data []byte) ([]byte, error) {
	if len(data) > 0 && data[0] == '{' {
		var v struct {
			Base64 *string `json:"base64"`
		}
		if err := json.Unmarshal(data, &v); err != nil || v.Base64 == nil {
			return dst, fmt.Errorf("chunk %.40q is not {\"base64\": …}: %v", data, err)
		}
		b, err := base64.StdEncoding.DecodeString(*v.Base64)
		if err != nil {
			return dst, err
		}
		return append(dst, b...), nil
	}
	return unquoteJSON(dst, data)
}

// unquoteJSON appends the value of the JSON string s to dst. It copies runs
// without escapes at once; encoding/json's decoder checks every byte twice.
func unquoteJSON(dst, s []byte) ([]byte, error) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return dst, fmt.Errorf("chunk %.40q is not a JSON string", s)
	}
	s = s[1 : len(s)-1]
	for len(s) > 0 {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			i = len(s)
		}
		run := s[:i]
		for _, b := range run {
			if b < 0x20 || b == '"' {
				return dst, errors.New("unescaped control byte or quote in JSON string")
			}
		}
		if !utf8.Valid(run) {
			return dst, errors.New("JSON string is not UTF-8")
		}
		dst = append(dst, run...)
		s = s[i:]
		if len(s) == 0 {
			break
		}
		if len(s) < 2 {
			return dst, errors.New("truncated escape in JSON string")
		}
		switch s[1] {
		case '"', '\\', '/':
			dst = append(dst, s[1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n, err := unquoteU(s)
			if err != nil {
				return dst, err
			}
			dst = utf8.AppendRune(dst, r)
			s = s[n:]
			continue
		default:
			return dst, fmt.Errorf("bad escape \\%c in JSON string", s[1])
		}
		s = s[2:]
	}
	return dst, nil
}

// unquoteU decodes \uXXXX (or a surrogate pair of them) at the start of s.
func unquoteU(s []byte) (rune, int, error) {
	hex := func(b []byte) (rune, bool) {
		if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
		return rune(v), err == nil
	}
	r, ok := hex(s)
	if !ok {
		return 0, 0, errors.New("bad \\u escape in JSON string")
	}
	if utf16.IsSurrogate(r) {
		if r2, ok := hex(s[6:]); ok {
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				return d, 12, nil
			}
		}
		return utf8.RuneError, 6, nil
	}
	return r, 6, nil
}
