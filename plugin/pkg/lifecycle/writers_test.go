package lifecycle

import "testing"

// H-6 during a reload: the old and the new instance both compute one thing; only the newest
// writes it, and when the newest leaves first (a failed reload) the one before writes again.
func TestWritersNewestWrites(t *testing.T) {
	ws := NewWriters()
	var got []string
	write := func(w *Writer, v string) { w.Write(func() { got = append(got, v) }) }
	rewrites := 0
	old := ws.Join("k", 1, func() { rewrites++ })
	write(old, "old")
	next := ws.Join("k", 2, nil)
	write(old, "old, late") // the old instance's computation finishing during the reload
	write(next, "new")
	if len(got) != 2 || got[1] != "new" {
		t.Fatalf("writes %q, want the old one's before the reload and the new one's", got)
	}
	next.Leave() // the new instance is abandoned
	next.Leave()
	if rewrites != 1 {
		t.Fatalf("%d rewrites asked of the old writer, want 1", rewrites)
	}
	write(old, "old again")
	if got[len(got)-1] != "old again" {
		t.Fatalf("writes %q", got)
	}
	other := ws.Join("k", 3, nil)
	old.Leave() // a successful reload: the old one leaves, the newest keeps writing, no rewrite
	if rewrites != 1 {
		t.Fatal("an old writer's leave asked for a rewrite")
	}
	other.Leave()
	if len(ws.line) != 0 {
		t.Fatalf("lines left: %v", ws.line)
	}
}

// H-6: the newest instance writes, not the newest join. An old instance that joins during a
// reload's overlap (a file reload of its data) queues behind the new instance, and writes again
// only if the new one leaves first.
func TestWritersNewestInstanceWritesH6(t *testing.T) {
	ws := NewWriters()
	var got []string
	write := func(w *Writer, v string) { w.Write(func() { got = append(got, v) }) }
	next := ws.Join("k", 2, nil)
	rewrites := 0
	late := ws.Join("k", 1, func() { rewrites++ }) // the old instance's file reload, after the new one started
	write(late, "old, reloaded")
	write(next, "new")
	if len(got) != 1 || got[0] != "new" {
		t.Fatalf("writes %q, want the new instance's only", got)
	}
	same := ws.Join("k", 2, nil) // a second block of the new instance: the later join of one instance writes
	write(next, "new, first block")
	write(same, "new, second block")
	if got[len(got)-1] != "new, second block" || len(got) != 2 {
		t.Fatalf("writes %q", got)
	}
	same.Leave()
	next.Leave() // the new instance is abandoned: the old one is asked to write again
	if rewrites != 1 {
		t.Fatalf("%d rewrites, want 1", rewrites)
	}
	late.Leave()
	if len(ws.line) != 0 {
		t.Fatalf("lines left: %v", ws.line)
	}
}
