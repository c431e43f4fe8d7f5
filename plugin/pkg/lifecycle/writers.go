package lifecycle

import (
	"slices"
	"sync"
)

// Writers orders, for each thing that instances compute and write (a VIP's state, a composite's
// destination, a configured share), the live instances that write it. During a reload the old and
// the new instance both run: only the newest writes, so the new configuration's result is the one
// that stands, whatever order their computations finish in. The newest is the writer of the
// newest instance (Generation), however late the others join: an old instance's file reload
// during the overlap joins behind the new instance. When the newest leaves first (a failed
// reload's instance is abandoned) the one before it is asked to write again.
type Writers struct {
	mu   sync.Mutex
	line map[any][]*Writer // oldest first
}

// Writer is one instance's place in the line of one key.
type Writer struct {
	ws      *Writers
	key     any
	gen     uint64
	rewrite func()
}

// NewWriters returns an empty Writers.
func NewWriters() *Writers { return &Writers{line: make(map[any][]*Writer)} }

// Join makes a writer of key for the instance of generation gen: behind the writers of newer
// instances, in front of those of the same or older ones. rewrite is called, without locks held,
// when the writer becomes the newest again because a newer one left.
func (ws *Writers) Join(key any, gen uint64, rewrite func()) *Writer {
	w := &Writer{ws: ws, key: key, gen: gen, rewrite: rewrite}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.line[key]
	i := len(l)
	for i > 0 && l[i-1].gen > gen {
		i--
	}
	ws.line[key] = slices.Insert(l, i, w)
	return w
}

// Write runs fn, with the line locked, when w is the newest writer of its key, and reports
// whether it ran.
func (w *Writer) Write(fn func()) bool {
	w.ws.mu.Lock()
	defer w.ws.mu.Unlock()
	l := w.ws.line[w.key]
	if len(l) == 0 || l[len(l)-1] != w {
		return false
	}
	fn()
	return true
}

// Leave removes w from its line; it does nothing the second time. If w was the newest, the writer
// before it is asked to write again.
func (w *Writer) Leave() {
	w.ws.mu.Lock()
	l := w.ws.line[w.key]
	var next *Writer
	for i, x := range l {
		if x != w {
			continue
		}
		if i == len(l)-1 && i > 0 {
			next = l[i-1]
		}
		l = append(l[:i], l[i+1:]...)
		break
	}
	if len(l) == 0 {
		delete(w.ws.line, w.key)
	} else {
		w.ws.line[w.key] = l
	}
	w.ws.mu.Unlock()
	if next != nil && next.rewrite != nil {
		next.rewrite()
	}
}
