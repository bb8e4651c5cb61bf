package proc

import "sync"

// Read buffers. A stream starts on a small buffer so that thousands of idle
// background jobs blocked in Read hold little memory, and moves to a large one
// once a read fills the small buffer. The pools are caches, not state.
const (
	smallBuf = 4 << 10
	largeBuf = 256 << 10
)

var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}
	largePool = sync.Pool{New: func() any { b := make([]byte, largeBuf); return &b }}
)

func getBuf(large bool) *[]byte {
	if large {
		return largePool.Get().(*[]byte)
	}
	return smallPool.Get().(*[]byte)
}

func putBuf(b *[]byte) {
	if len(*b) == largeBuf {
		largePool.Put(b)
		return
	}
	smallPool.Put(b)
}
