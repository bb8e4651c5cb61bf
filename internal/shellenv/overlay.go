package shellenv

import (
	"slices"
	"strings"
)

// KV is one managed environment entry.
type KV struct{ Key, Value string }

// Overlay is the immutable set of managed facts collected for one execution,
// sorted by key in byte order. The zero Overlay is empty. Overlays are safe
// for concurrent use; no method exposes the underlying storage.
type Overlay struct{ kvs []KV }

// NewOverlay returns the overlay of the entries of m, in key order. The
// pipeline gets overlays from Collect; NewOverlay is for callers that start
// jobs with a fixed overlay (tests, benchmarks).
func NewOverlay(m map[string]string) Overlay {
	kvs := make([]KV, 0, len(m))
	for k, v := range m {
		kvs = append(kvs, KV{k, v})
	}
	slices.SortFunc(kvs, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
	return Overlay{kvs: kvs}
}

// Len returns the number of entries.
func (o Overlay) Len() int { return len(o.kvs) }

// All returns a copy of the entries in key order.
func (o Overlay) All() []KV {
	out := make([]KV, len(o.kvs))
	copy(out, o.kvs)
	return out
}

// Get returns the value of key and whether it is present.
func (o Overlay) Get(key string) (string, bool) {
	lo, hi := 0, len(o.kvs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if o.kvs[m].Key < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(o.kvs) && o.kvs[lo].Key == key {
		return o.kvs[lo].Value, true
	}
	return "", false
}

// AppendEnv appends the entries to dst as "KEY=VALUE" strings in key order
// and returns the extended slice.
func (o Overlay) AppendEnv(dst []string) []string {
	for _, kv := range o.kvs {
		dst = append(dst, kv.Key+"="+kv.Value)
	}
	return dst
}

// Map returns the entries as a new map.
func (o Overlay) Map() map[string]string {
	m := make(map[string]string, len(o.kvs))
	for _, kv := range o.kvs {
		m[kv.Key] = kv.Value
	}
	return m
}
