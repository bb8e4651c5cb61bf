package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dshd/dshd/internal/beneath"
)

// The kinds of a watch's events.
const (
	Created  = "created"
	Modified = "modified" // a file written and closed
	Deleted  = "deleted"
	Renamed  = "renamed"
	// Overflow: events were lost (a client too slow for the ring, the
	// kernel's queue full, the view mounted afresh by a fork, a rewind or
	// an apply, too many directories): what is there now is to be listed
	// again.
	Overflow = "overflow"
)

// Watch bounds.
const (
	// WatchRing is how many recent events a watch keeps for its clients
	// (and for a client resuming): an older position is an Overflow.
	WatchRing = 4096
	// MaxWatchDirs bounds the directories one recursive watch follows;
	// past it, an Overflow says the rest is not watched.
	MaxWatchDirs = 8192
)

// Event is one change below a watched directory.
type Event struct {
	// Seq numbers a watch's events from 1.
	Seq  uint64
	Type string
	// Path is relative to the watched directory ("." for itself); From is
	// a rename's old path.
	Path, From string
	IsDir      bool
	// Reason says why an Overflow happened.
	Reason string
}

// Opener gives a watch the agent's scope when it needs one (to follow a
// new directory), and a function releasing it; a watch never keeps the
// scope, so that it holds no lease on the agent's view between events.
type Opener func() (*Scope, func(), error)

// Watch follows the changes below one directory of an agent's view with
// inotify, the directories below it too when recursive. Its events are
// kept in a ring of WatchRing, read by any number of clients at their own
// pace: a slow client loses events (Overflow), never grows the watch.
//
// Directories are entered by descriptor, no link followed (not even one
// that stays inside), and in the real file system never into the home,
// the token or a hidden path; names there are left out of the events.
type Watch struct {
	// ID names the watch in its events' ids; Key is what it watches.
	ID, Key   string
	Path      string // absolute, for the agent
	Recursive bool

	open   Opener
	ifd    int
	file   *os.File // ifd, read through the runtime's poller
	view   bool     // Path is in the agent's snapshot view
	vrel   string   // Path below the view's root
	real   string   // where Path really is (outside a view)
	hidden func(string) bool

	mu      sync.Mutex
	dirs    map[int32]wdir
	gen     int // the view's mount generation the current watches are on
	ring    []Event
	next    uint64 // Seq of the next event
	changed chan struct{}
	ended   bool
	full    bool // MaxWatchDirs reached (reported once)
	closeFn func()
}

type wdir struct {
	rel string
	gen int
}

const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Watch starts watching the directory p (Abs) as the agent sees it, under
// the read rules of Open (ErrHidden for the home, the token, a hidden path
// and /proc; ErrNotDir for a file). open gives the watch the agent's
// scope again when it follows a new directory.
func (s *Scope) Watch(p string, recursive bool, open Opener) (*Watch, error) {
	t, err := s.Open(p)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	if !t.IsDir() {
		return nil, fmt.Errorf("watch %s: %w", t.Path, ErrNotDir)
	}
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOMEM) {
		return nil, fmt.Errorf("watch %s: %w (%v: fs.inotify.max_user_instances, or dshd's open files)", t.Path, ErrWatchLimit, err)
	}
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", t.Path, err)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	w := &Watch{
		ID: "w" + hex.EncodeToString(b), Path: t.Path, Recursive: recursive, open: open,
		ifd: ifd, file: os.NewFile(uintptr(ifd), "inotify"), view: t.view,
		hidden: s.hidden, dirs: map[int32]wdir{}, next: 1, changed: make(chan struct{}),
	}
	if t.view {
		w.vrel = rel(t.Path, s.ViewTarget)
	} else if w.real, err = beneath.FdPath(int(t.File.Fd())); err != nil {
		w.file.Close()
		return nil, err
	}
	if err := w.addTree(int(t.File.Fd()), ".", 0, false); err != nil {
		w.file.Close()
		return nil, fmt.Errorf("watch %s: %w", t.Path, err)
	}
	go w.run()
	return w, nil
}

// hiddenRel reports whether rel, below the watched directory, is hidden
// (outside a view only: a view holds no hidden path).
func (w *Watch) hiddenRel(rel string) bool {
	return !w.view && w.hidden(path.Join(w.real, rel))
}

// addTree watches the directory dfd, at rel, and with Recursive the
// directories below it, entered by descriptor without following a link.
// announce emits Created for what it finds below (a directory just made
// may hold entries before its watch is in place).
func (w *Watch) addTree(dfd int, rel string, gen int, announce bool) error {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return nil
	}
	if len(w.dirs) >= MaxWatchDirs {
		if !w.full {
			w.full = true
			w.emitLocked(Event{Type: Overflow, Path: rel, Reason: fmt.Sprintf("more than %d directories: those past it are not watched", MaxWatchDirs)})
		}
		w.mu.Unlock()
		return nil
	}
	wd, err := unix.InotifyAddWatch(w.ifd, beneath.FdName(dfd), watchMask)
	if err == nil {
		w.dirs[int32(wd)] = wdir{rel: rel, gen: gen}
	}
	w.mu.Unlock()
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			w.overflow("the host's inotify watches are used up (fs.inotify.max_user_watches)")
			return nil
		}
		return err
	}
	if !w.Recursive && !announce {
		return nil
	}
	names, err := beneath.Names(dfd)
	if err != nil {
		return nil // gone since
	}
	for _, n := range names {
		sub := path.Join(rel, n)
		if w.hiddenRel(sub) || strings.HasPrefix(n, tempPrefix) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if announce {
			w.emit(Event{Type: Created, Path: sub, IsDir: isDir})
		}
		if !isDir || !w.Recursive {
			continue
		}
		cfd, err := beneath.Openat2(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath)
		if err != nil {
			continue // gone, or a link now
		}
		err = w.addTree(cfd, sub, gen, announce)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// root opens the watched directory again, from a fresh scope; the caller
// closes it and calls release.
func (w *Watch) root() (fd int, release func(), err error) {
	sc, release, err := w.open()
	if err != nil {
		return -1, nil, err
	}
	t, err := sc.Open(w.Path)
	if err != nil {
		release()
		return -1, nil, err
	}
	if !t.IsDir() {
		t.Close()
		release()
		return -1, nil, fmt.Errorf("watch %s: %w", w.Path, ErrNotDir)
	}
	fd, err = unix.Dup(int(t.File.Fd()))
	t.Close()
	if err != nil {
		release()
		return -1, nil, err
	}
	return fd, release, nil
}

// Remounted moves the watch onto the agent's view mounted afresh (by a
// checkpoint: the same files, on a new mount) at fd, before any job of the
// view runs on it; fd stays the caller's.
func (w *Watch) Remounted(fd int) {
	if !w.view {
		return
	}
	rfd, err := beneath.Openat2(fd, w.vrel, unix.O_RDONLY|unix.O_DIRECTORY, 0, resolveView)
	if err != nil {
		w.overflow("the view was mounted afresh and the directory is not in it")
		return
	}
	defer unix.Close(rfd)
	w.mu.Lock()
	w.gen++
	gen := w.gen
	for wd, d := range w.dirs {
		if d.gen < gen {
			_, _ = unix.InotifyRmWatch(w.ifd, uint32(wd))
			delete(w.dirs, wd)
		}
	}
	w.mu.Unlock()
	if err := w.addTree(rfd, ".", gen, false); err != nil {
		w.overflow("the view was mounted afresh: " + err.Error())
	}
}

// reattach puts the watch on the view as it is now, after its mount was
// replaced under it (a fork, a rewind or an apply): what changed meanwhile
// is not known, which the Overflow says.
//
// gen is the generation whose root went away. A checkpoint's remount
// lets the old mount go before it makes the new one, and no scope is
// given while it does (root waits): when the scope comes, Remounted has
// moved the watch already, with nothing lost, and there is nothing to do.
func (w *Watch) reattach(gen int) {
	fd, release, err := w.root()
	if err != nil {
		w.end(Event{Type: Deleted, Path: ".", IsDir: true})
		return
	}
	defer release()
	defer unix.Close(fd)
	w.mu.Lock()
	if w.gen != gen {
		w.mu.Unlock()
		return
	}
	w.gen++
	for wd, d := range w.dirs {
		if d.gen <= gen {
			_, _ = unix.InotifyRmWatch(w.ifd, uint32(wd))
			delete(w.dirs, wd)
		}
	}
	w.mu.Unlock()
	w.overflow("the agent's view was replaced (a fork, a rewind or an apply)")
	if err := w.addTree(fd, ".", gen+1, false); err != nil {
		w.end(Event{Type: Overflow, Reason: err.Error()})
	}
}

const tempPrefix = ".dshd-tmp-"

type moved struct {
	path  string
	isDir bool
}

// run reads inotify's events until the watch is closed or ends.
func (w *Watch) run() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			w.end(Event{})
			return
		}
		if w.batch(buf[:n]) {
			return
		}
	}
}

// batch turns one read's events into the watch's; it reports whether the
// watch has ended.
func (w *Watch) batch(b []byte) bool {
	pd := &pending{from: map[uint32]moved{}, remount: -1}
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
		b = b[unix.SizeofInotifyEvent+int(ev.Len):]
		if w.event(pd, ev, name) {
			return true
		}
	}
	w.settle(pd)
	return w.isEnded()
}

// pending is what one read's events leave for after the last of them:
// moves not paired (yet), directories made below the watch, and the
// generation whose mount went away (-1 for none).
type pending struct {
	from    map[uint32]moved
	newDirs []string
	remount int
}

// event turns one inotify event, named name, into the watch's; it reports
// whether the watch has ended (its root went away).
func (w *Watch) event(pd *pending, ev *unix.InotifyEvent, name string) bool {
	if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
		w.overflow("the kernel's event queue overflowed")
		return false
	}
	w.mu.Lock()
	d, ok := w.dirs[ev.Wd]
	cur := d.gen == w.gen
	if ev.Mask&unix.IN_IGNORED != 0 {
		delete(w.dirs, ev.Wd)
	}
	w.mu.Unlock()
	if !ok {
		return false
	}
	switch {
	case ev.Mask&unix.IN_IGNORED != 0:
		if d.rel == "." && cur && w.view {
			pd.remount = d.gen // the mount went away under the watch
		}
		return false
	case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
		if d.rel == "." && cur {
			w.end(Event{Type: Deleted, Path: ".", IsDir: true})
			return true
		}
		return false
	case !cur || name == "":
		return false
	}
	p := path.Join(d.rel, name)
	if w.hiddenRel(p) {
		return false
	}
	w.change(pd, ev, p, strings.HasPrefix(name, tempPrefix))
	return false
}

// change emits the event ev on the entry p (tmp: an upload's file, not yet
// renamed over its name), pairing its moves by cookie.
func (w *Watch) change(pd *pending, ev *unix.InotifyEvent, p string, tmp bool) {
	isDir := ev.Mask&unix.IN_ISDIR != 0
	switch {
	case ev.Mask&unix.IN_CREATE != 0:
		if tmp {
			return
		}
		w.emit(Event{Type: Created, Path: p, IsDir: isDir})
		if isDir && w.Recursive {
			pd.newDirs = append(pd.newDirs, p)
		}
	case ev.Mask&unix.IN_CLOSE_WRITE != 0:
		if !tmp {
			w.emit(Event{Type: Modified, Path: p})
		}
	case ev.Mask&unix.IN_DELETE != 0:
		if !tmp {
			w.emit(Event{Type: Deleted, Path: p, IsDir: isDir})
		}
	case ev.Mask&unix.IN_MOVED_FROM != 0:
		pd.from[ev.Cookie] = moved{path: p, isDir: isDir}
	case ev.Mask&unix.IN_MOVED_TO != 0:
		old, paired := pd.from[ev.Cookie]
		delete(pd.from, ev.Cookie)
		switch {
		case paired && strings.HasPrefix(path.Base(old.path), tempPrefix):
			// An upload's new file renamed over its name.
			w.emit(Event{Type: Modified, Path: p})
		case paired:
			w.emit(Event{Type: Renamed, Path: p, From: old.path, IsDir: isDir})
			if isDir {
				w.renameDirs(old.path, p)
			}
		default:
			w.emit(Event{Type: Created, Path: p, IsDir: isDir})
			if isDir && w.Recursive {
				pd.newDirs = append(pd.newDirs, p)
			}
		}
	}
}

// settle acts on what a read's events left pending: moves not paired are
// moves out of the watched tree, directories made are followed, and a
// view whose mount went away is watched afresh.
func (w *Watch) settle(pd *pending) {
	for _, m := range pd.from {
		// Moved out of the watched tree.
		if strings.HasPrefix(path.Base(m.path), tempPrefix) {
			continue
		}
		w.emit(Event{Type: Deleted, Path: m.path, IsDir: m.isDir})
		if m.isDir {
			w.forgetDirs(m.path)
		}
	}
	if len(pd.newDirs) > 0 {
		w.follow(pd.newDirs)
	}
	if pd.remount >= 0 {
		w.reattach(pd.remount)
	}
}

// follow adds the directories made below the watch, from a fresh scope.
func (w *Watch) follow(dirs []string) {
	fd, release, err := w.root()
	if err != nil {
		return // the root went away: its own event ends the watch
	}
	defer release()
	defer unix.Close(fd)
	w.mu.Lock()
	gen := w.gen
	w.mu.Unlock()
	for _, d := range dirs {
		dfd, err := beneath.Openat2(fd, d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveBeneath)
		if err != nil {
			continue // gone, or a link on the way
		}
		if err := w.addTree(dfd, d, gen, true); err != nil {
			w.overflow(fmt.Sprintf("%s is not watched: %v", d, err))
		}
		unix.Close(dfd)
	}
}

// renameDirs moves the watched directories below old to new.
func (w *Watch) renameDirs(old, new string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, d := range w.dirs {
		if d.rel == old || strings.HasPrefix(d.rel, old+"/") {
			d.rel = new + d.rel[len(old):]
			w.dirs[wd] = d
		}
	}
}

// forgetDirs stops watching the directories below p (moved out).
func (w *Watch) forgetDirs(p string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, d := range w.dirs {
		if d.rel == p || strings.HasPrefix(d.rel, p+"/") {
			_, _ = unix.InotifyRmWatch(w.ifd, uint32(wd))
			delete(w.dirs, wd)
		}
	}
}

func (w *Watch) overflow(reason string) { w.emit(Event{Type: Overflow, Reason: reason}) }

func (w *Watch) emit(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emitLocked(e)
}

func (w *Watch) emitLocked(e Event) {
	if w.ended {
		return
	}
	e.Seq = w.next
	w.next++
	if len(w.ring) < WatchRing {
		w.ring = append(w.ring, e)
	} else {
		w.ring[int((e.Seq-1)%WatchRing)] = e
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// end emits last (when it has a Type) and ends the watch.
func (w *Watch) end(last Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	if last.Type != "" {
		w.emitLocked(last)
	}
	w.ended = true
	close(w.changed)
	w.changed = make(chan struct{})
}

func (w *Watch) isEnded() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended
}

// Since returns up to max events after seq, whether events after seq were
// lost (no longer in the ring: the first returned is the oldest kept), a
// channel closed when another event arrives, and whether the watch has
// ended (no event will follow those returned).
func (w *Watch) Since(seq uint64, max int) (evs []Event, lost bool, changed <-chan struct{}, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	oldest := uint64(1)
	if w.next > WatchRing {
		oldest = w.next - WatchRing
	}
	if seq+1 < oldest {
		lost = true
		seq = oldest - 1
	}
	if seq+1 > w.next {
		seq = w.next - 1 // a position from the future: from now on
	}
	for s := seq + 1; s < w.next && len(evs) < max; s++ {
		evs = append(evs, w.ring[int((s-1)%WatchRing)])
	}
	ended = w.ended && seq+uint64(len(evs))+1 >= w.next
	return evs, lost, w.changed, ended
}

// Last is the Seq of the latest event (0 before any).
func (w *Watch) Last() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next - 1
}

// Close stops the watch.
func (w *Watch) Close() {
	w.end(Event{})
	w.mu.Lock()
	fn := w.closeFn
	w.closeFn = nil
	w.mu.Unlock()
	if fn != nil {
		fn()
	}
	// Under the lock: nothing adds or removes a watch on the descriptor
	// (or a number reused for another file) once it is closed.
	w.mu.Lock()
	_ = w.file.Close()
	w.mu.Unlock()
}

// OnClose sets a function Close calls once (to unregister the watch from
// its view's remounts).
func (w *Watch) OnClose(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closeFn = fn
}

// EventID is the id of event seq of watch id, as an event stream sends
// it; ParseEventID reads one back.
func EventID(id string, seq uint64) string { return id + "." + strconv.FormatUint(seq, 10) }

// ParseEventID splits an EventID; ok is false for anything else.
func ParseEventID(s string) (id string, seq uint64, ok bool) {
	id, n, found := strings.Cut(s, ".")
	if !found || id == "" {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	return id, seq, err == nil
}

// Watches holds the live watches, shared by the clients watching the same
// thing, each kept for linger after its last client leaves so that a
// client reconnecting resumes where it was.
type Watches struct {
	linger time.Duration
	mu     sync.Mutex
	byKey  map[string]*watchRef
	byID   map[string]*watchRef
	closed bool
}

type watchRef struct {
	w       *Watch
	clients int
	timer   *time.Timer
}

// DefaultWatchLinger is how long a watch outlives its last client.
const DefaultWatchLinger = time.Minute

// NewWatches returns an empty set of watches; linger 0 is
// DefaultWatchLinger.
func NewWatches(linger time.Duration) *Watches {
	if linger <= 0 {
		linger = DefaultWatchLinger
	}
	return &Watches{linger: linger, byKey: map[string]*watchRef{}, byID: map[string]*watchRef{}}
}

// ErrWatchesClosed: the server is shutting down.
var ErrWatchesClosed = errors.New("watches closed")

// Open returns the live watch of key, or one made by mk, and a function
// the client calls when it leaves.
func (ws *Watches) Open(key string, mk func() (*Watch, error)) (*Watch, func(), error) {
	ws.mu.Lock()
	if r := ws.byKey[key]; r != nil && !r.w.isEnded() {
		defer ws.mu.Unlock()
		return r.w, ws.hold(r), nil
	}
	ws.mu.Unlock()
	w, err := mk()
	if err != nil {
		return nil, nil, err
	}
	w.Key = key
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		w.Close()
		return nil, nil, ErrWatchesClosed
	}
	if r := ws.byKey[key]; r != nil && !r.w.isEnded() {
		// Another client made one meanwhile: share it.
		w.Close()
		return r.w, ws.hold(r), nil
	}
	if old := ws.byKey[key]; old != nil {
		ws.dropLocked(old)
	}
	r := &watchRef{w: w}
	ws.byKey[key], ws.byID[w.ID] = r, r
	return w, ws.hold(r), nil
}

// Resume returns the watch id when it is still kept and watches key.
func (ws *Watches) Resume(id, key string) (*Watch, func(), bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	r := ws.byID[id]
	if r == nil || r.w.Key != key {
		return nil, nil, false
	}
	return r.w, ws.hold(r), true
}

func (ws *Watches) hold(r *watchRef) func() {
	r.clients++
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			ws.mu.Lock()
			defer ws.mu.Unlock()
			if r.clients--; r.clients > 0 || ws.byID[r.w.ID] != r {
				return
			}
			r.timer = time.AfterFunc(ws.linger, func() {
				ws.mu.Lock()
				defer ws.mu.Unlock()
				if r.clients == 0 && ws.byID[r.w.ID] == r {
					ws.dropLocked(r)
				}
			})
		})
	}
}

func (ws *Watches) dropLocked(r *watchRef) {
	if ws.byKey[r.w.Key] == r {
		delete(ws.byKey, r.w.Key)
	}
	delete(ws.byID, r.w.ID)
	if r.timer != nil {
		r.timer.Stop()
	}
	go r.w.Close()
}

// Len is the number of watches kept.
func (ws *Watches) Len() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.byID)
}

// Close stops every watch (their streams end).
func (ws *Watches) Close() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	for _, r := range ws.byID {
		ws.dropLocked(r)
	}
}
